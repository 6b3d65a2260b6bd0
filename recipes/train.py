"""`python -m recipes.train`: `keras-vit train` from a checkout."""

import sys

if __name__ == "__main__":
    from keras_vit.recipes.__main__ import exit_status
    from keras_vit.recipes.__main__ import main

    status = main(["train", *sys.argv[1:]], invoked_as="python -m recipes.{command}")
    sys.exit(exit_status(status))
