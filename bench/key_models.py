"""Named, seeded models of attention keys, values and decode queries (numpy, float32).

    import key_models
    keys, values, queries = key_models.draw("llm", heads=8, tokens=131072, dim=128, q_heads=32)

Every bench and test that needs keys like real ones draws them here; `dev/harness/key_models.cpp`
is the same models in C++ for the CLI (`--keys-model`). A real cache can be read from `.npy`
instead (`cudaops ivf build --keys`). The models, and why each:

- ``mix8``: eight directions a head with a common offset (2 + N(0, 0.5) per channel) and noise
  0.3; queries are keys plus noise. Easy to cluster: the bench's original keys.
- ``gaussian``: isotropic N(0, 1) keys; queries Gaussian. Nothing to find: the worst case for
  clustering and for the pruned global pass.
- ``llm``: what real keys carry (per-head offset; a few outlier channels; low-rank content that
  drifts along the sequence; rotary position embedding):
  * a per-head offset N(0, 0.5^2) per channel;
  * four outlier channels per head at +-(5 to 10), with noise 0.5;
  * content U_h (s * z_t): U_h a random orthonormal [D, 32] basis, s_j = 3 * 0.85^j a decaying
    spectrum, z_t = mu_topic(t) + a_t with a new topic (mu ~ N(0, 0.6^2)) every ~2000 tokens
    (geometric lengths) and a_t an AR(1) process (rho 0.98, stationary variance 0.4);
  * noise N(0, 0.2^2); then RoPE (base 10000, the halves of the head rotated, as Llama does) at
    each token's position.
  Queries of query head g: the content of a recent position (lag 0 to 63 from the end, the
  latent jittered by N(0, 0.3^2)), roped at the decode position S, scaled so that the logits
  q . k / sqrt(D) over the head's tokens have a standard deviation of 2.5: the top 2% of tokens
  then hold most, not all, of the softmax mass.
Values are N(0, 1) in every model.
"""

import numpy as np

MODELS = ("mix8", "gaussian", "llm")
RANK = 32
ROPE_BASE = 10000.0
LOGIT_STD = 2.5


def rope(x, positions, base=ROPE_BASE):
    """x [..., T, D] rotated by RoPE at `positions` [T] (the halves of D paired, as Llama)."""
    d = x.shape[-1]
    half = d // 2
    inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / d)
    angle = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
    a, b = x[..., :half], x[..., half:2 * half]
    out = np.array(x, dtype=np.float32, copy=True)
    out[..., :half] = a * cos - b * sin
    out[..., half:2 * half] = a * sin + b * cos
    return out


def ar1(innovations, rho):
    """x_t = rho x_{t-1} + e_t along axis 0, from x_{-1} = 0, in log2(T) vector steps."""
    x = np.array(innovations, dtype=np.float32, copy=True)
    step, power = 1, np.float32(rho)
    while step < x.shape[0]:
        x[step:] += power * x[:-step]
        step *= 2
        power = np.float32(power * power)
    return x


def _llm_head(rng, tokens, dim, q_per_head, n_queries, roped=True):
    offset = rng.normal(0.0, 0.5, dim).astype(np.float32)
    outliers = rng.choice(dim, size=min(4, dim), replace=False)
    outlier_values = (rng.uniform(5.0, 10.0, len(outliers)) *
                      rng.choice([-1.0, 1.0], len(outliers))).astype(np.float32)
    basis, _ = np.linalg.qr(rng.normal(size=(dim, RANK)))
    basis = basis.astype(np.float32)
    spectrum = (3.0 * 0.85 ** np.arange(RANK)).astype(np.float32)
    # Topics: geometric lengths of mean 2000 tokens, each with its own mean latent.
    topic = np.cumsum(rng.random(tokens) < 1.0 / 2000.0)
    means = rng.normal(0.0, 0.6, (int(topic[-1]) + 1, RANK)).astype(np.float32)
    rho = 0.98
    innovations = rng.normal(0.0, np.sqrt(0.4 * (1 - rho * rho)), (tokens, RANK)).astype(np.float32)
    latent = means[topic] + ar1(innovations, rho)
    content = (latent * spectrum) @ basis.T
    keys = content + offset
    keys[:, outliers] = outlier_values + rng.normal(0.0, 0.5, (tokens, len(outliers)))
    keys += rng.normal(0.0, 0.2, keys.shape).astype(np.float32)
    if roped:
        keys = rope(keys, np.arange(tokens))
    # Queries: recent content, roped at the decode position.
    lags = rng.integers(0, 64, (q_per_head, n_queries))
    at = tokens - 1 - np.minimum(lags, tokens - 1)
    q_latent = latent[at] + rng.normal(0.0, 0.3, (q_per_head, n_queries, RANK)).astype(np.float32)
    queries = (q_latent * spectrum) @ basis.T
    if roped:
        queries = rope(queries.reshape(-1, dim), np.full(q_per_head * n_queries, tokens))
    return keys, queries.reshape(q_per_head, n_queries, dim)


def _scale_logits(keys, queries, target=LOGIT_STD, sample=8192, rng=None):
    """queries [G, Q, D] scaled so that q . k / sqrt(D) spreads with std `target` over keys."""
    d = keys.shape[-1]
    rows = keys if keys.shape[0] <= sample else keys[rng.choice(keys.shape[0], sample, False)]
    logits = np.einsum("gqd,td->gqt", queries, rows) / np.sqrt(d)
    std = logits.std(axis=-1, keepdims=True)
    return (queries * (target / np.maximum(std, 1e-12))).astype(np.float32)


def draw(model, heads, tokens, dim, q_heads=None, n_queries=1, seed=0, roped=True):
    """keys [heads, tokens, dim], values [heads, tokens, dim] and queries [q_heads, n_queries,
    dim], float32 numpy arrays of the named model (see the module's text). q_heads: a multiple
    of heads (None: heads). roped=False leaves RoPE out of `llm` (for tests of its content)."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    q_heads = heads if q_heads is None else q_heads
    if q_heads % heads != 0:
        raise ValueError(f"q_heads ({q_heads}) must be a multiple of heads ({heads})")
    rng = np.random.default_rng(seed)
    group = q_heads // heads
    keys = np.empty((heads, tokens, dim), np.float32)
    queries = np.empty((q_heads, n_queries, dim), np.float32)
    for h in range(heads):
        if model == "llm":
            k, q = _llm_head(rng, tokens, dim, group, n_queries, roped)
        elif model == "gaussian":
            k = rng.normal(size=(tokens, dim)).astype(np.float32)
            q = rng.normal(size=(group, n_queries, dim)).astype(np.float32)
        else:
            offset = (2.0 + 0.5 * rng.normal(size=dim)).astype(np.float32)
            dirs = rng.normal(size=(8, dim)).astype(np.float32)
            k = offset + dirs[rng.integers(0, 8, tokens)]
            k += 0.3 * rng.normal(size=(tokens, dim)).astype(np.float32)
            near = k[rng.integers(0, tokens, group * n_queries)]
            q = (near + 0.3 * rng.normal(size=near.shape)).reshape(group, n_queries, dim)
        if model != "mix8":
            q = _scale_logits(k, q, rng=rng)
        keys[h] = k
        queries[h * group:(h + 1) * group] = q
    values = rng.normal(size=(heads, tokens, dim)).astype(np.float32)
    return keys, values, queries


def logit_std(keys, queries):
    """The standard deviation over tokens of q . k / sqrt(D), per (query head, query)."""
    heads, d = keys.shape[0], keys.shape[-1]
    group = queries.shape[0] // heads
    k = np.repeat(keys, group, axis=0)
    return (np.einsum("gqd,gtd->gqt", queries, k) / np.sqrt(d)).std(axis=-1)
