"""Records and error types that several layers share (storage keeps them, integrations make them, secrets and
tools read them): a leaf package, so that storage need not import the integrations service's package."""
