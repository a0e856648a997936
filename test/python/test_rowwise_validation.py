"""Argument checks of the row-wise ops, through stand-in arrays whose memory is never touched:
every error is raised before any CUDA call, so these run without a GPU."""

import pytest

import cudaops


def test_names_exported():
    for name in ["softmax", "softmax_backward", "layer_norm", "layer_norm_backward", "rms_norm",
                 "rms_norm_backward", "fused_add_rms_norm"]:
        assert callable(getattr(cudaops, name)), name
        assert name in cudaops.__all__


def test_zero_dim_refused(dl):
    with pytest.raises(ValueError, match=r"softmax: x: expected at least one dimension"):
        cudaops.softmax(dl([]))


def test_last_axis_must_be_contiguous(dl):
    with pytest.raises(ValueError, match=r"softmax: x: expected the last axis contiguous .*"
                                         r"strides \(1, 8\)"):
        cudaops.softmax(dl([8, 8], strides=[1, 8]))


def test_leading_axes_must_collapse(dl):
    # rows of the middle axis are 16 apart but the outer axis steps 40: not one row spacing.
    with pytest.raises(ValueError, match=r"rms_norm: x: expected the last axis contiguous"):
        cudaops.rms_norm(dl([2, 2, 8], strides=[40, 16, 1]), dl([8]))


def test_weight_shape_and_dtype(dl):
    with pytest.raises(ValueError, match=r"layer_norm: weight: expected shape \(8,\) to match "
                                         r"the last axis of x, got \(7,\)"):
        cudaops.layer_norm(dl([4, 8]), dl([7]), dl([8]))
    with pytest.raises(TypeError, match=r"layer_norm: bias: dtype float16 does not match x's"):
        cudaops.layer_norm(dl([4, 8]), dl([8]), dl([8], "float16"))
    with pytest.raises(ValueError, match=r"rms_norm: weight: expected shape \(8,\)"):
        cudaops.rms_norm(dl([4, 8]), dl([2, 4]))


def test_integer_data_refused(dl):
    with pytest.raises(TypeError, match=r"softmax: x: dtype int32 is not supported; expected "
                                        r"float32, float16 or bfloat16"):
        cudaops.softmax(dl([4, 8], "int32"))


def test_out_checked(dl):
    with pytest.raises(ValueError, match=r"softmax: out: shape \(4, 9\) does not match x's"):
        cudaops.softmax(dl([4, 8]), out=dl([4, 9]))
    with pytest.raises(TypeError, match=r"softmax_backward: out: dtype float16"):
        cudaops.softmax_backward(dl([4, 8]), dl([4, 8]), out=dl([4, 8], "float16"))
    with pytest.raises(ValueError, match=r"softmax: out: .*read-only"):
        cudaops.softmax(dl([4, 8]), out=dl([4, 8], readonly=True))


def test_backward_shapes(dl):
    with pytest.raises(ValueError, match=r"softmax_backward: dy: shape \(4, 7\) does not match"):
        cudaops.softmax_backward(dl([4, 8]), dl([4, 7]))
    with pytest.raises(TypeError, match=r"layer_norm_backward: mean: expected float32, got "
                                        r"float16"):
        cudaops.layer_norm_backward(dl([4, 8], "float16"), dl([4, 8], "float16"),
                                    dl([8], "float16"), dl([4], "float16"), dl([4]))
    with pytest.raises(ValueError, match=r"rms_norm_backward: rstd: expected 4 elements \(one "
                                         r"per row\), got shape \(5,\)"):
        cudaops.rms_norm_backward(dl([4, 8]), dl([4, 8]), dl([8]), dl([5]))


def test_fused_needs_writable_arrays(dl):
    with pytest.raises(ValueError, match=r"fused_add_rms_norm: residual: .*read-only"):
        cudaops.fused_add_rms_norm(dl([4, 8]), dl([4, 8], readonly=True), dl([8]))


def test_cpu_arrays_refused(dl):
    with pytest.raises(ValueError, match=r"layer_norm: x: .*CPU"):
        cudaops.layer_norm(dl([4, 8], device=(1, 0)), dl([8]), dl([8]))
