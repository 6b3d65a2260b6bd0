"""Small argument helpers shared by the layers, models, data and exports.

Example:

```python
from keras_vit.utils import to_pair

to_pair(224, "image_size")  # (224, 224)
```
"""

from __future__ import annotations


def to_pair(value, name: str) -> tuple[int, int]:
    """Returns `value` as a `(height, width)` pair of positive ints.

    Args:
        value: An int, or a sequence of two ints.
        name: The argument's name, used in the error message.

    Raises:
        ValueError: if `value` is not one or two positive ints.

    Example:

    >>> to_pair((224, 320), "image_size")
    (224, 320)
    """
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or any(int(v) != v or int(v) <= 0 for v in pair):
        raise ValueError(
            f"`{name}` must be a positive int or a pair of positive ints. "
            f"Received: {name}={value!r}"
        )
    return (int(pair[0]), int(pair[1]))


def subset_of(values, allowed: tuple[str, ...], name: str) -> tuple[str, ...]:
    """Returns `values` (one name or several) as a tuple in `allowed`'s order.

    Args:
        values: A name, or a sequence of names.
        allowed: The names accepted, in their canonical order.
        name: The argument's name, used in the error message.

    Raises:
        ValueError: if `values` is empty or holds a name not in `allowed`.

    Example:

    >>> subset_of(("out", "query"), ("query", "key", "out"), "targets")
    ('query', 'out')
    """
    values = (values,) if isinstance(values, str) else tuple(values)
    if not values or any(v not in allowed for v in values):
        raise ValueError(
            f"`{name}` must be a non-empty subset of {allowed}. "
            f"Received: {name}={values!r}"
        )
    return tuple(v for v in allowed if v in values)
