"""Runnable recipes built on `keras_vit`: `python -m recipes.<name> --help`."""
