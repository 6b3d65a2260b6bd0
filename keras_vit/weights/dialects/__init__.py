"""Key dialects: each source's names for the original layout's keys.

One engine (`rules`: `Rule`, `Dialect`, `translate`) and one table per
dialect, with the array converters the tables name (`convert`) and rule
pairs for common layers (`layers`):

- `ours`: keras_vit's own variable paths (both ways: loading and saving);
- `timm`, `huggingface`: PyTorch state dicts (`.safetensors`);
- `big_vision`: the SigLIP image tower of a two-towers `.npz`;
- `keras_hub`: keras-hub's `ViTBackbone` and `DINOV2Backbone` variables.

The engine imports no table: `keras_vit.weights.checkpoint` picks a dialect
by the keys it sees and hands it over, so adding a dialect is one module and
one row in `checkpoint.DIALECTS`.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
