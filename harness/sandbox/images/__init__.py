"""Images: recipes, local builds, registry pulls, the inventory, and moves between engines.

``python -m harness.sandbox.images`` builds every local image the project uses, once."""
