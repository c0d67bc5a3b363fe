"""Finding detectors: one module per kind, each registering itself in `base.REGISTRY`.
`base.all_detectors()` imports the modules listed in `base.MODULES`."""
