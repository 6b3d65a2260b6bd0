"""The ViT layers, each registered for `.keras` serialization, and the speed
switches that pick their code paths (`keras_vit/layers/config.py`)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
