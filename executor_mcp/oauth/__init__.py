"""OAuth 2.1 for connections (and the pieces console sign-in shares): the wire as plain functions and attrs
values (`pkce`, `metadata`, `grants`, `registration`, `flows`), tested without a network; what sends and stores
sits above them."""
