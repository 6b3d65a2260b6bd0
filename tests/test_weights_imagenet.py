"""ImageNet-1k class names shipped with keras_vit, and decode_predictions."""

from __future__ import annotations

import numpy as np
import pytest

from keras_vit import imagenet


def test_class_table_is_complete_and_in_index_order():
    wnids, names = imagenet.synsets(), imagenet.class_names()
    assert len(wnids) == len(set(wnids)) == len(names) == 1000
    assert wnids == sorted(wnids)  # the standard order of the 1k checkpoints
    assert (wnids[0], names[0]) == ("n01440764", "tench")
    assert imagenet.class_names(full=True)[1] == "goldfish, Carassius auratus"


def test_decode_predictions_on_a_known_vector():
    preds = np.zeros((2, 1000), "float32")
    preds[0, [281, 409, 954]] = [5.0, 3.0, 1.0]
    preds[1, 999] = 2.0
    decoded = imagenet.decode_predictions(preds, top=3)
    assert decoded[0] == [
        ("n02123045", "tabby", 5.0),
        ("n02708093", "analog clock", 3.0),
        ("n07753592", "banana", 1.0),
    ]
    assert decoded[1][0] == ("n15075141", "toilet tissue", 2.0)
    assert len(imagenet.decode_predictions(preds)[0]) == 5


@pytest.mark.parametrize("shape", [(1000,), (2, 10), (1, 21843)])
def test_decode_predictions_rejects_other_shapes(shape):
    with pytest.raises(ValueError, match=r"\(samples, 1000\)"):
        imagenet.decode_predictions(np.zeros(shape))
