"""Double-precision references and per-dtype tolerances for the GPU tests."""

import numpy as np

# One rounding of the result: the largest relative error of a correctly rounded value.
TOLERANCE = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}
# Below the smallest normal the error is absolute.
FLOOR = {"float32": 2.0**-126, "float16": 2.0**-14, "bfloat16": 2.0**-126}


def check_close(got, expected, dtype):
    """got, expected: float64 numpy arrays. Relative error within one rounding of dtype."""
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if got.size == 0:
        return
    scale = np.maximum(np.abs(expected), FLOOR[dtype])
    error = np.abs(got - expected) / scale
    worst = int(np.argmax(error))
    assert error.flat[worst] <= TOLERANCE[dtype], (
        f"{dtype}: relative error {error.flat[worst]:.3g} at flat index {worst}: "
        f"got {got.flat[worst]!r}, expected {expected.flat[worst]!r}")


def random_values(rng, shape):
    """Random values in +-[0.5, 2): never zero, exactly representable in every dtype's range."""
    magnitude = rng.uniform(0.5, 2.0, size=shape)
    sign = np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)
    return magnitude * sign
