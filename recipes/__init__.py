"""`python -m recipes.<command>` in a checkout: the `keras-vit` commands.

The recipes are `keras_vit.recipes` (installed with the package, where the
same commands are `keras-vit <command>`); each module here only starts one.
"""
