"""The offline demo: a small handbook site in ``site/`` served on 127.0.0.1."""
