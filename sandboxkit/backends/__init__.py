"""Provider adapters: one module per provider, each a thin :class:`~sandboxkit.protocol.Backend`."""
