"""Where connection credentials live: secret providers, the encrypted store's cipher, the CLI prompt.

Layers, imports pointing down only:
  providers.py    the provider interface, the `encrypted`, `env` and `file` providers and their registry
  cipher.py       AES-256-GCM payloads and the master key (env or `<data-dir>/secret.key`)
  prompt.py       reading one value from a TTY or standard input, for the CLI

A value never appears in a return value other than `get`'s, a log line or an exception message.
"""
