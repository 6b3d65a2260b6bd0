"""Fine-tuning add-ons: LoRA adapters, their files and merge, quantization,
layer-wise rates.

Each works on any keras_vit ViT (described by `keras_vit.models.ViTLayout`)
and builds on Keras 3's own primitives: `Dense.enable_lora` for the MLP,
`MultiHeadSelfAttention.enable_lora` (the same contract for the fused
kernels), the optimizers' per-variable rates (`make_optimizer`'s
`lr_multipliers`). Quantization is Keras's `model.quantize("int8")`, which
reaches the attention layers too (`quantize` here also those with
`qk_norm`); remat is `keras_vit.ViT(..., remat=True)`.
See `docs/finetuning.md` for the measured trade-offs.

Example:

```python
model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
keras_vit.finetune.enable_lora(model, rank=4, alpha=8)
# ... train: only the adapters and the head are trainable ...
keras_vit.finetune.save_lora_weights(model, "adapters.npz")
plain = keras_vit.finetune.merge_lora(model)  # for keras_vit.export.export
```
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
