"""The web console's pages: small, self-contained HTML (no external assets, no framework, no build step), so
they ship inside the single executable. The first one is the connect page of a handoff link."""
