"""The trajectory viewer (issue 46): a static page per unit, an index over runs."""
