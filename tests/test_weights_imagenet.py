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
    # Logits (values outside [0, 1]) are reported as softmax probabilities.
    decoded = imagenet.decode_predictions(preds, top=3)
    exp = np.exp(preds.astype(np.float64) - preds.max(1, keepdims=True))
    probs = exp / exp.sum(1, keepdims=True)
    assert [(w, n) for w, n, _ in decoded[0]] == [
        ("n02123045", "tabby"), ("n02708093", "analog clock"), ("n07753592", "banana")
    ]  # fmt: skip
    np.testing.assert_allclose(
        [p for *_, p in decoded[0]], probs[0, [281, 409, 954]], rtol=1e-6
    )
    assert decoded[1][0][:2] == ("n15075141", "toilet tissue")
    assert decoded[1][0][2] == pytest.approx(probs[1, 999], rel=1e-6)
    assert len(imagenet.decode_predictions(preds)[0]) == 5
    # Scores that are already probabilities come back as they are.
    raw = imagenet.decode_predictions(preds, top=1, from_logits=False)
    assert raw[0] == [("n02123045", "tabby", 5.0)]


@pytest.mark.parametrize("shape", [(1000,), (2, 10), (1, 21843)])
def test_decode_predictions_rejects_other_shapes(shape):
    with pytest.raises(ValueError, match=r"\(samples, 1000\)"):
        imagenet.decode_predictions(np.zeros(shape))
