"""The web console's pages: Jinja templates and a few static scripts packaged with the code (no external
assets, no framework, no build step), so they ship inside the single executable."""
