"""fused_conv_bn2d against conv_bn_reference (F.conv2d then F.batch_norm): outputs, running
stats and gradients in training and eval, gradcheck, double backward, the sliced backward of
large batches, and the bytes it saves (no conv output)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.ops import conv_bn_backward, conv_bn_reference, fused_conv_bn2d, saved_tensor_bytes
from tests.ops.helpers import DEVICES, grads

CONVS = [{}, {"padding": 1}, {"padding": (1, 0), "stride": 2}, {"padding": "same", "dilation": 2},
         {"padding": "same"}, {"padding": "valid"}, {"groups": 2}]


def _case(n=3, c_in=4, c_out=6, hw=(7, 6), k=(2, 3), groups=1, dtype=torch.float64,
          device="cpu", channels_last=False, seed=0):
    """x, conv weight, BN weight and bias (leaves), running mean and var."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    x, w = randn(n, c_in, *hw), randn(c_out, c_in // groups, *k)
    if channels_last:
        x, w = x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)
    leaves = [t.requires_grad_() for t in (x, w, randn(c_out), randn(c_out))]
    return leaves, [randn(c_out), randn(c_out).abs() + 0.5]


def _run(fn, leaves, stats, training, grad_seed=1, **conv):
    """Output, gradients of the leaves and the running stats after one call of `fn`."""
    stats = [s.clone() for s in stats]
    out = fn(*leaves, *stats, training, 0.1, 1e-5, **conv)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed),
                           dtype=out.dtype).to(out.device)
    return [out, *grads(out, leaves, grad_out), *stats]


def _assert_same(fn_kwargs, leaves, stats, training=True, **tol):
    got = _run(fused_conv_bn2d, leaves, stats, training, **fn_kwargs)
    want = _run(conv_bn_reference, leaves, stats, training, **fn_kwargs)
    for name, a, b in zip(["out", "x", "w", "bn_w", "bn_b", "mean", "var"], got, want,
                          strict=True):
        torch.testing.assert_close(a, b, msg=name, **tol)


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("conv", CONVS, ids=str)
def test_outputs_running_stats_and_gradients_equal_the_reference(conv, channels_last, training,
                                                                 device):
    leaves, stats = _case(groups=conv.get("groups", 1), channels_last=channels_last,
                          device=device)
    _assert_same(conv, leaves, stats, training)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 3), hw=st.tuples(st.integers(2, 5),
       st.integers(2, 5)), k=st.integers(1, 3), stride=st.integers(1, 2),
       padding=st.integers(0, 1), seed=st.integers(0, 99))
def test_random_shapes_match_the_reference_in_float32(n, c, hw, k, stride, padding, seed):
    leaves, stats = _case(n, c, c + 1, hw, (k, k), dtype=torch.float32, seed=seed)
    out_hw = [(s + 2 * padding - k) // stride + 1 for s in hw]
    if min(out_hw) < 1 or n * out_hw[0] * out_hw[1] == 1:
        return  # F.conv2d / F.batch_norm refuse these: see test_refusals_are_the_references
    _assert_same({"stride": stride, "padding": padding}, leaves, stats, rtol=1e-4, atol=1e-4)


def test_refusals_are_the_references():
    leaves, stats = _case(n=1, hw=(2, 3), k=(2, 3))  # one value per channel
    for fn in (fused_conv_bn2d, conv_bn_reference):
        with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
            fn(*leaves, *stats, True)


def test_an_empty_batch_in_training_keeps_the_running_stats_like_the_reference():
    leaves, stats = _case(n=0)
    _assert_same({}, leaves, stats)


def test_no_affine_and_no_running_stats_match_the_reference():
    leaves, _ = _case()
    x, w = leaves[:2]
    for fn_args in ((x, w, None, None, None, None, True), (x, w, None, None, *_case()[1], True)):
        got, want = fused_conv_bn2d(*fn_args), conv_bn_reference(*fn_args)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(grads(got, (x, w), got), grads(want, (x, w), want))


def test_gradcheck_and_gradgradcheck_in_float64():
    leaves, stats = _case(n=2, c_in=2, c_out=2, hw=(2, 3), k=(2, 2))

    def fn(*leaves):
        # Fresh stats each call: training updates them in place.
        return fused_conv_bn2d(*leaves, *(s.clone() for s in stats), True, padding=1)

    assert torch.autograd.gradcheck(fn, leaves, fast_mode=True)
    assert torch.autograd.gradgradcheck(fn, leaves, fast_mode=True)


def test_the_bias_gradient_alone_needs_no_recompute():
    leaves, stats = _case()
    x, w, gamma, beta = (t.detach() for t in leaves)
    for fn in (fused_conv_bn2d, conv_bn_reference):
        b = beta.clone().requires_grad_()
        fn(x, w, gamma, b, *(s.clone() for s in stats), True).sum().backward()
        torch.testing.assert_close(b.grad, torch.full_like(b, x.shape[0] * 6 * 4))


@pytest.mark.parametrize("channels_last", [False, True])
def test_large_batches_run_the_backward_in_slices_with_the_same_gradients(channels_last,
                                                                          monkeypatch):
    # One call holds at most 2 samples' conv output here: the sliced pieces all run.
    monkeypatch.setattr(conv_bn_backward, "ONE_CALL_BYTES", 2 * 6 * 7 * 6 * 8)
    monkeypatch.setattr(conv_bn_backward, "SLICE_BYTES", 2 * 6 * 7 * 6 * 8)
    leaves, stats = _case(n=5, channels_last=channels_last)
    assert len(conv_bn_backward.batch_slices(torch.empty(5, 6, 7, 6, dtype=torch.float64))) == 3
    _assert_same({"padding": 1}, leaves, stats)


def test_it_saves_its_input_weight_and_statistics_not_the_conv_output():
    leaves, stats = _case(n=8, c_in=1, c_out=16, hw=(16, 16), k=(3, 3))
    saved = {}
    for fn in (fused_conv_bn2d, conv_bn_reference):
        with saved_tensor_bytes() as saved[fn]:
            fn(*leaves, *stats, True, padding=1)
    x, w, gamma = leaves[:3]
    per_channel = 16 * 8
    assert saved[fused_conv_bn2d].bytes == x.nbytes + w.nbytes + gamma.nbytes + 2 * per_channel
    conv_output = 8 * 16 * 16 * 16 * 8
    assert saved[conv_bn_reference].bytes >= conv_output > 10 * saved[fused_conv_bn2d].bytes


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
def test_cuda_peak_memory_of_a_conv_stack_is_at_most_0_6x_the_references():
    from models.layers import FusedConvBN2d

    def peak(op):
        torch.manual_seed(0)
        layers = []
        for i in range(4):
            layers += [FusedConvBN2d(16 if i == 0 else 32, 32, 3, padding=1, op=op),
                       torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers).cuda()
        x = torch.randn(64, 16, 32, 32, device="cuda", requires_grad=True)
        model(x).sum().backward()  # warm-up: grads and cuDNN workspaces allocated
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        model(x).sum().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    assert peak(fused_conv_bn2d) <= 0.6 * peak(conv_bn_reference)


def test_under_torch_compile_its_backward_is_one_call_of_each_kernel(monkeypatch):
    # Slicing bounds eager mode's peak; traced into a compiled graph, the slices cost 3x the
    # time and 1.6x the peak of one call each (bench.cnn, batch 1024): the compiler plans it.
    monkeypatch.setattr(conv_bn_backward, "ONE_CALL_BYTES", 1)
    monkeypatch.setattr(conv_bn_backward, "SLICE_BYTES", 1)
    torch.compiler.reset()
    leaves, stats = _case(n=5)
    compiled = torch.compile(lambda *leaves: fused_conv_bn2d(*leaves, *stats, True, padding=1),
                             backend="aot_eager")
    out = compiled(*leaves)
    with torch.profiler.profile() as prof:
        torch.autograd.grad(out, leaves, torch.ones_like(out))
    names = [e.name for e in prof.events()]
    assert names.count("aten::convolution_backward") == 1
    assert names.count("aten::native_batch_norm_backward") == 1
