"""The errors `keras_vit.weights` raises for checkpoints it cannot load."""

from __future__ import annotations

from keras_vit._export import export


@export("keras_vit.weights.CheckpointError")
class CheckpointError(ValueError):
    """A checkpoint that does not fit the model, or cannot be read.

    Raised for a missing, unexpected or mis-shaped key (the message names each
    key with the checkpoint's and the model's shape), a pickled or corrupt
    file, or an unknown key layout. The model's weights are never changed
    when it is raised.

    Attributes:
        missing: Checkpoint keys the model needs and the file lacks.
        unexpected: Keys in the file that the model has no place for.
        mismatched: `{key: (checkpoint_shape, model_shape)}`.
    """

    def __init__(self, message, *, missing=(), unexpected=(), mismatched=None):
        super().__init__(message)
        self.missing = list(missing)
        self.unexpected = list(unexpected)
        self.mismatched = dict(mismatched or {})


@export("keras_vit.weights.VariantMismatchError")
class VariantMismatchError(CheckpointError):
    """The checkpoint is another architecture (e.g. a B/16 file, L/16 model).

    Detected from the checkpoint's shapes before any weight is changed.
    """


@export("keras_vit.weights.TruncatedFileError")
class TruncatedFileError(CheckpointError):
    """A checkpoint file that ends before the data it declares, or whose
    bytes do not decode: cut short or corrupt. A downloaded file of this
    kind is replaced by downloading it again (`force_download=True`)."""


@export("keras_vit.weights.WeightsNotFoundError")
class WeightsNotFoundError(FileNotFoundError):
    """A known pretrained tag whose file is not cached and cannot be fetched.

    The message names the file and the directory to put it in.
    """
