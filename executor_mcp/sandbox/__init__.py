"""The JavaScript sandbox: QuickJS-NG in supervised worker processes, and what runs inside them."""
