"""The layers of Park & Kim's CNNs and AlterNet, each registered for
`.keras` serialization: pre- and post-activation residual blocks
(`conv_blocks.py`), AlterNet's MSA block (`msa_block.py`) and its windowed
2-D attention (`local_attention.py`)."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
