"""Rule pairs for common layers, in PyTorch's and in Keras's parameter names.

A dense or norm layer has two parameters, named by its framework: PyTorch's
`nn.Linear` `weight` `(out, in)` and `bias`, `nn.LayerNorm`/`nn.GroupNorm`
`weight` and `bias`; Keras's `Dense` `kernel` and `bias`, `LayerNormalization`
`gamma` and `beta`. Each function here returns the two `Rule`s that map one
such layer (a pattern for its path) onto an original-layout layer
(`kernel`/`bias`, `scale`/`bias`), so that a table spells a layer once.

Example:

```python
rules = (*torch_linear(r"blocks\\.(?P<i>\\d+)\\.mlp\\.fc1", keys.MLP_1),)
# blocks.{i}.mlp.fc1.weight -> .../MlpBlock_3/Dense_0/kernel (transposed)
# blocks.{i}.mlp.fc1.bias   -> .../MlpBlock_3/Dense_0/bias
```
"""

from __future__ import annotations

from keras_vit.weights.dialects.convert import transpose
from keras_vit.weights.dialects.rules import Convert
from keras_vit.weights.dialects.rules import Rule
from keras_vit.weights.dialects.rules import same


def torch_linear(
    source: str, layer: str, weight: Convert = transpose, bias: Convert = same
) -> tuple[Rule, Rule]:
    """`source.weight`/`.bias` -> `layer/kernel`/`layer/bias`."""
    return (
        Rule(source + r"\.weight", layer + "/kernel", weight),
        Rule(source + r"\.bias", layer + "/bias", bias),
    )


def torch_norm(source: str, layer: str) -> tuple[Rule, Rule]:
    """`source.weight`/`.bias` -> `layer/scale`/`layer/bias`."""
    return (
        Rule(source + r"\.weight", layer + "/scale"),
        Rule(source + r"\.bias", layer + "/bias"),
    )


def keras_dense(source: str, layer: str) -> tuple[Rule, Rule]:
    """`source/kernel`/`/bias` -> `layer/kernel`/`layer/bias` (same axes)."""
    return (
        Rule(source + "/kernel", layer + "/kernel"),
        Rule(source + "/bias", layer + "/bias"),
    )


def keras_norm(source: str, layer: str) -> tuple[Rule, Rule]:
    """`source/gamma`/`/beta` -> `layer/scale`/`layer/bias`."""
    return (
        Rule(source + "/gamma", layer + "/scale"),
        Rule(source + "/beta", layer + "/bias"),
    )
