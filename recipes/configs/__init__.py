"""Moved to `keras_vit.recipes.configs` (this name warns and will go)."""
