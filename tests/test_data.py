"""helpers.data: the offline fallback is real handwritten digits, and it says so."""
import torch

from helpers import data


def test_fallback_is_announced():
    src = data.prepare()
    assert src.name == "scikit-learn digits" and "offline" in src.detail


def test_shapes_and_splits_are_disjoint_and_mnist_like():
    train, test = data.load(train=True).tensors, data.load(train=False).tensors
    assert train[0].shape[1:] == (1, 28, 28) and train[1].dtype == torch.long
    assert len(train[0]) + len(test[0]) == 1797
    assert set(train[1].tolist()) == set(range(10))
    assert train[0].min() >= -1 and train[0].max() <= 1  # Normalize((0.5,), (0.5,)) of [0, 1]
    assert (train[0][:, :, :4, :] == -1).all()  # MNIST's empty border


def test_images_are_real_digits_not_noise():
    """A nearest-centroid classifier, fitted on train, must read the test digits."""
    (xtr, ytr), (xte, yte) = data.load(True).tensors, data.load(False).tensors
    centroids = torch.stack([xtr[ytr == c].flatten(1).mean(0) for c in range(10)])
    pred = torch.cdist(xte.flatten(1), centroids).argmin(1)
    assert (pred == yte).float().mean() > 0.8


def test_cached_digits_equal_freshly_built(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "DATA_DIR", tmp_path)
    fresh = data._digits_tensors()
    assert (tmp_path / "sklearn-digits-28x28.pt").exists()
    cached = data._digits_tensors()
    assert all(torch.equal(a, b) for a, b in zip(fresh, cached))
