"""Who is asking: turning a request's credentials into the principal that owns sessions."""
