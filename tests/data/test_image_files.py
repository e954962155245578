"""gyre.data._datasets: MNIST / Fashion-MNIST IDX and CIFAR-10 binary readers, on small files
written here (the IDX and CIFAR formats built by hand, independently of the readers)."""

import gzip
import struct

import numpy as np
import pytest

from gyre.data import cifar10, fashion_mnist, mnist

IDX_NAMES = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
]


def idx_bytes(magic, dims, values):
    return struct.pack(">I", magic) + struct.pack(f">{len(dims)}I", *dims) + bytes(values)


def write(path, data, gz=False):
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


@pytest.fixture
def pixels():
    rng = np.random.default_rng(0)
    return {
        "train": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
        "t10k": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8),
    }


LABELS = {"train": [0, 9, 3, 3, 7], "t10k": [1, 2, 8]}


def write_idx_set(folder, pixels, gz=(False, False, False, False)):
    names = iter(gz)
    for part in ("train", "t10k"):
        images = pixels[part]
        write(folder / f"{part}-images-idx3-ubyte", idx_bytes(0x803, images.shape, images.tobytes()), next(names))
        labels = LABELS[part]
        write(folder / f"{part}-labels-idx1-ubyte", idx_bytes(0x801, [len(labels)], labels), next(names))


@pytest.mark.parametrize("reader", [mnist, fashion_mnist])
@pytest.mark.parametrize("gz", [(False,) * 4, (True,) * 4, (True, False, False, True)])
def test_idx_read_back_exactly(tmp_path, pixels, reader, gz):
    write_idx_set(tmp_path, pixels, gz)
    (x_train, y_train), (x_test, y_test) = reader(str(tmp_path))
    assert x_train.shape == (5, 28, 28, 1) and x_test.shape == (3, 28, 28, 1)
    assert x_train.dtype == np.float32 and y_train.dtype == np.int32 and y_test.dtype == np.int32
    np.testing.assert_array_equal(x_train[..., 0], pixels["train"].astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(x_test[..., 0], pixels["t10k"].astype(np.float32) / np.float32(255))
    np.testing.assert_array_equal(np.rint(x_train[..., 0] * 255).astype(np.uint8), pixels["train"])
    assert y_train.tolist() == LABELS["train"] and y_test.tolist() == LABELS["t10k"]
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    assert x_train.flags.c_contiguous and x_train.flags.writeable and y_train.flags.writeable


def test_idx_extremes_are_0_and_1(tmp_path):
    values = np.zeros((2, 28, 28), np.uint8)
    values[1] = 255
    for part in ("train", "t10k"):
        write(tmp_path / f"{part}-images-idx3-ubyte", idx_bytes(0x803, (2, 28, 28), values.tobytes()))
        write(tmp_path / f"{part}-labels-idx1-ubyte", idx_bytes(0x801, [2], [4, 5]))
    (x, y), _ = mnist(tmp_path)
    assert x[0].max() == 0.0 and x[1].min() == 1.0 and y.tolist() == [4, 5]


@pytest.mark.parametrize("reader, name", [(mnist, "MNIST"), (fashion_mnist, "Fashion-MNIST")])
def test_idx_missing_files_lists_names_and_source(tmp_path, pixels, reader, name):
    with pytest.raises(FileNotFoundError, match=f"{name} files are missing") as info:
        reader(tmp_path)
    message = str(info.value)
    for file in IDX_NAMES:
        assert f"{file} (or {file}.gz)" in message
    assert ("yann.lecun.com/exdb/mnist" if name == "MNIST" else "zalandoresearch/fashion-mnist") in message
    # One file missing: only that one is listed.
    write_idx_set(tmp_path, pixels)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte.gz") as info:
        reader(tmp_path)
    assert "train-images" not in str(info.value).split("expected:")[1].split("\n")[0]


def test_missing_folder_and_bad_path_type(tmp_path):
    with pytest.raises(FileNotFoundError, match="the MNIST folder does not exist") as info:
        mnist(tmp_path / "nowhere")
    assert "yann.lecun.com" in str(info.value)
    with pytest.raises(TypeError, match="reads its files from a folder given as a path"):
        mnist(3)
    with pytest.raises(FileNotFoundError, match="the CIFAR-10 folder does not exist"):
        cifar10(tmp_path / "nowhere")


def corrupt_case(tmp_path, pixels, file, data):
    write_idx_set(tmp_path, pixels)
    (tmp_path / file).write_bytes(data)


def test_idx_wrong_magic_names_file_expected_and_received(tmp_path, pixels):
    labels = idx_bytes(0x801, [5], LABELS["train"])
    corrupt_case(tmp_path, pixels, "train-images-idx3-ubyte", labels)  # a labels file as images
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte is corrupt: wrong IDX magic") as info:
        mnist(tmp_path)
    assert "expected: magic 0x00000803" in str(info.value)
    assert "received: magic 0x00000801 (a labels file)" in str(info.value)
    assert "fix: download the file again" in str(info.value)


def test_idx_garbage_magic_and_short_files(tmp_path, pixels):
    corrupt_case(tmp_path, pixels, "t10k-labels-idx1-ubyte", b"\x1f\x8b\x08\x00junk")
    with pytest.raises(ValueError, match=r"t10k-labels-idx1-ubyte is corrupt: wrong IDX magic.*\n.*\n  received: magic 0x1F8B0800"):
        mnist(tmp_path)
    corrupt_case(tmp_path, pixels, "t10k-labels-idx1-ubyte", b"\x00\x00")
    with pytest.raises(ValueError, match=r"too short for an IDX header"):
        mnist(tmp_path)
    corrupt_case(tmp_path, pixels, "train-images-idx3-ubyte", struct.pack(">II", 0x803, 5))
    with pytest.raises(ValueError, match=r"the IDX header is cut short[\s\S]*expected: 16 bytes of header"):
        mnist(tmp_path)


def test_idx_size_not_matching_header(tmp_path, pixels):
    images = pixels["train"]
    truncated = idx_bytes(0x803, images.shape, images.tobytes())[:-10]
    corrupt_case(tmp_path, pixels, "train-images-idx3-ubyte", truncated)
    with pytest.raises(ValueError, match="the file size does not match its header") as info:
        mnist(tmp_path)
    assert "expected: 3936 bytes (16 of header + 5 x 28 x 28 values)" in str(info.value)
    assert "received: 3926 bytes" in str(info.value)


def test_idx_dimensions_not_28_by_28(tmp_path, pixels):
    corrupt_case(tmp_path, pixels, "t10k-images-idx3-ubyte", idx_bytes(0x803, (2, 8, 8), bytes(128)))
    with pytest.raises(ValueError, match=r"unexpected IDX dimensions[\s\S]*expected: dimensions \(n, 28, 28\)[\s\S]*received: dimensions \(2, 8, 8\)"):
        mnist(tmp_path)


def test_idx_label_count_differs_from_image_count(tmp_path, pixels):
    corrupt_case(tmp_path, pixels, "train-labels-idx1-ubyte", idx_bytes(0x801, [4], [1, 2, 3, 4]))
    with pytest.raises(ValueError, match="disagree on the number of examples") as info:
        mnist(tmp_path)
    assert "5 images in" in str(info.value) and "4 labels in" in str(info.value)


def test_idx_label_out_of_range(tmp_path, pixels):
    corrupt_case(tmp_path, pixels, "t10k-labels-idx1-ubyte", idx_bytes(0x801, [3], [1, 2, 10]))
    with pytest.raises(ValueError, match=r"labels out of range[\s\S]*received: a label 10"):
        mnist(tmp_path)


def test_idx_bad_gzip(tmp_path, pixels):
    write_idx_set(tmp_path, pixels)
    (tmp_path / "train-labels-idx1-ubyte").unlink()
    good = gzip.compress(idx_bytes(0x801, [5], LABELS["train"]))
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(good[:-6])
    with pytest.raises(ValueError, match=r"train-labels-idx1-ubyte.gz is not a readable gzip file"):
        mnist(tmp_path)


# CIFAR-10 ----------------------------------------------------------------------------------

CIFAR_TRAIN = [f"data_batch_{i}.bin" for i in range(1, 6)]


def cifar_records(labels, images):
    """Records as the format describes them: label byte, then R, G, B planes of 32 x 32."""
    out = b""
    for label, image in zip(labels, images, strict=True):  # image (32, 32, 3)
        out += bytes([label]) + b"".join(image[:, :, c].tobytes() for c in range(3))
    return out


def write_cifar(folder, rng):
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for i, name in enumerate([*CIFAR_TRAIN, "test_batch.bin"]):
        n = 1 + i % 3
        images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        labels = [(i + k) % 10 for k in range(n)]
        (folder / name).write_bytes(cifar_records(labels, images))
        written[name] = (images, labels)
    return written


@pytest.mark.parametrize("inner", [True, False])
def test_cifar10_read_back_exactly(tmp_path, inner):
    folder = tmp_path / "cifar-10-batches-bin" if inner else tmp_path
    written = write_cifar(folder, np.random.default_rng(1))
    (x_train, y_train), (x_test, y_test) = cifar10(tmp_path)
    images = np.concatenate([written[n][0] for n in CIFAR_TRAIN])
    labels = sum((written[n][1] for n in CIFAR_TRAIN), [])
    assert x_train.shape == (len(labels), 32, 32, 3) == (1 + 2 + 3 + 1 + 2, 32, 32, 3)
    assert x_train.dtype == np.float32 and y_train.dtype == np.int32 and y_test.dtype == np.int32
    np.testing.assert_array_equal(x_train, images.astype(np.float32) / np.float32(255))
    assert y_train.tolist() == labels
    test_images, test_labels = written["test_batch.bin"]
    np.testing.assert_array_equal(x_test, test_images.astype(np.float32) / np.float32(255))
    assert y_test.tolist() == test_labels and x_test.shape == (3, 32, 32, 3)
    assert x_train.flags.c_contiguous and x_test.flags.c_contiguous and x_train.flags.writeable


def test_cifar10_channel_major_layout(tmp_path):
    # One record: red plane all 255, green plane a ramp over the first row, blue 0.
    red, green = bytes([255] * 1024), bytes(list(range(32)) + [0] * 992)
    record = bytes([6]) + red + green + bytes(1024)
    for name in [*CIFAR_TRAIN, "test_batch.bin"]:
        (tmp_path / name).write_bytes(record)
    (x, y), _ = cifar10(tmp_path)
    assert y.tolist() == [6] * 5
    assert x[0, :, :, 0].min() == 1.0 and x[0, :, :, 2].max() == 0.0
    assert (x[0, 0, :, 1] * 255).round().tolist() == list(range(32)) and x[0, 1:, :, 1].max() == 0.0


def test_cifar10_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="CIFAR-10 files are missing") as info:
        cifar10(tmp_path)
    message = str(info.value)
    assert all(n in message for n in [*CIFAR_TRAIN, "test_batch.bin"])
    assert "cs.toronto.edu/~kriz/cifar.html" in message and "binary version" in message
    write_cifar(tmp_path / "cifar-10-batches-bin", np.random.default_rng(0))
    (tmp_path / "cifar-10-batches-bin" / "data_batch_3.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"cifar-10-batches-bin[\s\S]*expected: the files data_batch_3.bin\n"):
        cifar10(tmp_path)


def test_cifar10_still_packed_or_python_version(tmp_path):
    (tmp_path / "cifar-10-binary.tar.gz").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="is still packed: run tar xzf cifar-10-binary.tar.gz"):
        cifar10(tmp_path)
    other = tmp_path / "py"
    (other / "cifar-10-batches-py").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="looks like the 'CIFAR-10 python version'"):
        cifar10(other)


@pytest.mark.parametrize("size", [0, 3072, 3074, 2 * 3073 + 5])
def test_cifar10_size_not_multiple_of_record(tmp_path, size):
    write_cifar(tmp_path, np.random.default_rng(0))
    (tmp_path / "data_batch_2.bin").write_bytes(bytes(size))
    with pytest.raises(ValueError, match="data_batch_2.bin is corrupt: its size is not a whole number") as info:
        cifar10(tmp_path)
    assert "expected: a multiple of 3073 bytes" in str(info.value)
    assert f"received: {size} bytes ({size // 3073} records and {size % 3073} bytes over)" in str(info.value)


def test_cifar10_label_out_of_range(tmp_path):
    write_cifar(tmp_path, np.random.default_rng(0))
    (tmp_path / "test_batch.bin").write_bytes(bytes([11]) + bytes(3072))
    with pytest.raises(ValueError, match=r"test_batch.bin is corrupt: labels out of range"):
        cifar10(tmp_path)
