"""Rate limits on tool calls: per org, per account and per connection."""
