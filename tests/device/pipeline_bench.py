"""pipeline_bench.py: the denoising step of a video transformer, dense
against Tessera and FlexAttention with the same sparse masks (the figure of
issue 16).  Run on the GPU machine through tests/device/run BUILDDIR
pipeline MODEL (diffusers carried as wheels: see tests/device/README).

    python3 tests/device/pipeline_bench.py wan|cogvideox|hunyuan [--reps N] [--json FILE]
        [--methods vsa,sta,svg,xattention] [--no-flex] [--no-check] [--compile]
        [--hoist off|on|both] [--select-rows N]

The transformer is built from its published config (written below from the
models' transformer/config.json; no download), random weights, bf16, on the
GPU, and run on random latents and text embeddings of the published
setting.  One step = one transformer forward (the pipeline's two CFG calls
are two such steps).  For each case, after warm-up calls, the median of
--reps CUDA-event-timed forwards, then one profiled forward (per-layer CUDA
events: mask production, attention, FlexAttention's BlockMask build):

  dense       the model's own attention, SDPA with cuDNN first
              (sdpa_kernel([CUDNN, FLASH, EFFICIENT], set_priority=True))
  tessera M   tessera.diffusers.apply(method=M), every layer sparse except
              the method's published dense layers (SVG: the first 3%)
  flex M      the same masks through FlexAttention (backend="flex": an
              exact BlockMask of the same block mask, flex_attention
              compiled)

--compile times every case's steps (dense included) through
torch.compile(model): Wan's eager step spends ~260 of its ~600 ms outside
attention (the matmuls, and the norms, modulation and RoPE between them,
which inductor fuses), the same in every case.
--hoist: off (default here; apply()'s own default is "auto", which hoists
where it can) gathers q, k, v and the output around every
attention call; on: apply(hoist=True), VSA's and STA's token order hoisted
to Wan's entry (hidden states and RoPE tables permuted once a step); both
times the two and compares them on one step (masks equal? outputs bit for
bit? printed, not asserted: see apply()).  The producers: VSA and SpargeAttn run libtessera's fused
kernels on CUDA tensors (tessera.produce; printed at the start).
--select-rows N: the fused select kernel's query rows a CTA (0: automatic).
Reported per case: step ms, attention ms and its share of the step, mask
production ms (the producer alone; the token permutation is in attention),
a 50-step projection = warm-up steps x dense step + the rest x the case's
step (the methods' published warm-up: VSA 5, STA 12, SVG 10 of 50), and
the speed-up over dense.  Then one step layer by layer with check="flex":
Tessera's output of every sparse layer against FlexAttention's on the same
q, k, v and mask: max |diff| / max |flex| within bf16 tolerance (2e-2).
Exit status 1 when a check fails or a case raises.
"""
import argparse
import json
import statistics
import sys
import time

import torch

import tessera.diffusers as td

# transformer/config.json of the published checkpoints (diffusers format).
CONFIGS = {
    # Wan-AI/Wan2.1-T2V-1.3B-Diffusers
    "wan": dict(cls="WanTransformer3DModel", config=dict(
        patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
        out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30,
        cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, image_dim=None,
        added_kv_proj_dim=None, rope_max_seq_len=1024),
        # 832x480, 81 frames: VAE 8x8 spatial, 4x temporal -> 21 x 60 x 104 latents
        latents=(1, 16, 21, 60, 104), text=512,
        sta=dict(window=(3, 3, 3)), svg=dict(density=0.3, sink=True)),
    # THUDM/CogVideoX-5b
    "cogvideox": dict(cls="CogVideoXTransformer3DModel", config=dict(
        num_attention_heads=48, attention_head_dim=64, in_channels=16, out_channels=16,
        flip_sin_to_cos=True, freq_shift=0, time_embed_dim=512, text_embed_dim=4096,
        num_layers=42, dropout=0.0, attention_bias=True, sample_width=90, sample_height=60,
        sample_frames=49, patch_size=2, temporal_compression_ratio=4, max_text_seq_length=226,
        activation_fn="gelu-approximate", timestep_activation_fn="silu",
        norm_elementwise_affine=True, norm_eps=1e-5, spatial_interpolation_scale=1.875,
        temporal_interpolation_scale=1.0, use_rotary_positional_embeddings=True,
        use_learned_positional_embeddings=False),
        # 720x480, 49 frames -> 13 x 60 x 90 latents, [B, F, C, H, W]
        latents=(1, 13, 16, 60, 90), text=226,
        sta=dict(window=(2, 3, 3)), svg=dict(density=0.3, sink=False)),
    # hunyuanvideo-community/HunyuanVideo; 1280x720 at 33 frames (9 x 90 x 160
    # latents, 32,400 tokens) keeps a dense step near 10 s; --frames 129 is
    # the published 118,800-token setting.
    "hunyuan": dict(cls="HunyuanVideoTransformer3DModel", config=dict(
        in_channels=16, out_channels=16, num_attention_heads=24, attention_head_dim=128,
        num_layers=20, num_single_layers=40, num_refiner_layers=2, mlp_ratio=4.0, patch_size=2,
        patch_size_t=1, qk_norm="rms_norm", guidance_embeds=True, text_embed_dim=4096,
        pooled_projection_dim=768, rope_theta=256.0, rope_axes_dim=(16, 56, 56)),
        latents=(1, 16, 9, 90, 160), text=256,
        sta=dict(window=(2, 3, 5)), svg=dict(density=0.25, sink=False)),
}
STEPS = 50
TOL = 2e-2
# --smoke: the same flow on the CPU with configs cut down (float32, the CPU
# plan executor), to check the script here before device time is spent.
SMOKE = {"wan": dict(num_attention_heads=2, attention_head_dim=24, ffn_dim=64, num_layers=3,
                     text_dim=32, freq_dim=32, in_channels=4, out_channels=4),
         "cogvideox": dict(num_attention_heads=2, attention_head_dim=16, num_layers=2, in_channels=4,
                           out_channels=4, text_embed_dim=32, time_embed_dim=16, sample_width=12,
                           sample_height=10, sample_frames=17, max_text_seq_length=7),
         "hunyuan": dict(num_attention_heads=2, attention_head_dim=16, num_layers=1,
                         num_single_layers=2, num_refiner_layers=1, in_channels=4, out_channels=4,
                         text_embed_dim=32, pooled_projection_dim=16, rope_axes_dim=(4, 6, 6))}
SMOKE_LATENTS = {"wan": (1, 4, 6, 12, 14), "cogvideox": (1, 5, 4, 10, 12), "hunyuan": (1, 4, 5, 12, 14)}
DEV, DT = "cuda", torch.bfloat16


def build(name, frames=None, smoke=False):
    import diffusers
    c = CONFIGS[name]
    cls = getattr(diffusers, c["cls"])
    cfg = dict(c["config"], **(SMOKE[name] if smoke else {}))
    torch.manual_seed(0)
    t0 = time.time()
    with torch.device(DEV):
        model = cls(**cfg)
    model = model.to(DT).eval()
    shape = list(SMOKE_LATENTS[name] if smoke else c["latents"])
    if frames:
        shape[1 if name == "cogvideox" else 2] = (frames - 1) // 4 + 1
    dev, bf = DEV, DT
    text, tdim = (7, 32) if smoke else (c["text"], 4096)
    inputs = dict(hidden_states=torch.randn(*shape, device=dev, dtype=bf),
                  encoder_hidden_states=torch.randn(1, text, tdim, device=dev, dtype=bf),
                  timestep=torch.tensor([999], device=dev))
    if name == "hunyuan":
        mask = torch.zeros(1, text, dtype=torch.long, device=dev)
        mask[:, :text * 25 // 32] = 1  # a 200-token prompt, padded to 256 (the model's key padding)
        pdim = cfg["pooled_projection_dim"]
        inputs.update(encoder_attention_mask=mask, pooled_projections=torch.randn(1, pdim, device=dev, dtype=bf),
                      guidance=torch.tensor([6000.0], device=dev, dtype=bf))
    if name == "cogvideox":
        from diffusers.models.embeddings import get_3d_rotary_pos_embed
        _, f, _, h, w = shape  # [B, F, C, H, W]
        gh, gw = h // 2, w // 2
        cos, sin = get_3d_rotary_pos_embed(embed_dim=cfg["attention_head_dim"], crops_coords=((0, 0), (gh, gw)),
                                           grid_size=(gh, gw), temporal_size=f, device=dev)
        inputs["image_rotary_emb"] = (cos, sin)
    print(f"{name}: {c['cls']} built in {time.time() - t0:.1f} s, "
          f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, latents {shape}",
          flush=True)
    return model, inputs


def forward(model, inputs):
    with torch.no_grad(), _sdpa():
        return model(**inputs, return_dict=False)[0]


def _sdpa():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                        SDPBackend.EFFICIENT_ATTENTION], set_priority=True)


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def time_steps(model, inputs, reps, warm=2):
    """Median ms of reps forwards after warm ones (synchronised before and
    after each: a forward reads timings back, so events would not add)."""
    for _ in range(warm):
        forward(model, inputs)
    ms = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        forward(model, inputs)
        sync()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def hoist_check(model, inputs, method, kw):
    """One step with the order hoisted and one gathered per call: masks
    equal, outputs bit for bit (the hoist's exactness on the device)."""
    outs, recs = [], []
    for hoist in (False, True):
        h = td.apply(model, method=method, backend="tessera", dense_steps=0, step_from="manual",
                     record=True, hoist=hoist, **kw)
        try:
            assert h._hoist == hoist
            outs.append(forward(model, inputs).float())
            recs.append(h.recorded)
        finally:
            h.remove()
    masks = sorted(recs[0]) == sorted(recs[1]) and all(torch.equal(recs[0][k].mask, recs[1][k].mask)
                                                       for k in recs[0])
    d = float((outs[0] - outs[1]).abs().max() / outs[0].abs().max())
    return masks, torch.equal(outs[0], outs[1]), d


def case(model, inputs, method, backend, reps, kw, compiled=False):
    """(step ms, profile dict, handle facts) of one method and backend.  With
    compiled, the steps are timed through torch.compile(model) (compiled
    afresh for the case, in the warm-up calls); the profiled forward stays
    eager, as its per-layer events time the same attention and producer
    kernels."""
    h = td.apply(model, method=method, backend=backend, dense_steps=0, step_from="manual",
                 profile=False, **kw) if method else \
        td.apply(model, method="vsa", dense_steps=1 << 30, step_from="manual", hoist=False)
    try:
        cmp = None
        if compiled:
            # One eager forward first: the producers' index caches filled
            # before tracing, else the first trace misses them and compiles
            # the model a second time (a guard on the cache's contents).
            forward(model, inputs)
            torch._dynamo.reset()
            fast = torch.compile(model)
            step = time_steps(fast, inputs, reps, warm=3)
            # The compiled step computes what the eager one does (bf16 rounding apart).
            a, b = forward(fast, inputs).float(), forward(model, inputs).float()
            cmp = float((a - b).abs().max() / b.abs().max())
        else:
            step = time_steps(model, inputs, reps)
        h.profile = True
        h.timings()
        t0 = time.perf_counter()
        forward(model, inputs)
        sync()
        wall = (time.perf_counter() - t0) * 1e3
        prof = h.timings()
        prof["profiled_step"] = wall
        if cmp is not None:
            prof["compiled_vs_eager"] = cmp
        facts = {"dense_layers": sorted(h.dense_layers), "layers": len(h.layers),
                 "hoisted": bool(method and h._hoist)}
        return step, prof, facts
    finally:
        h.remove()


def density_of(model, inputs, method, kw):
    """Mean block-pair and token density of the method's masks on one step."""
    h = td.apply(model, method=method, backend="tessera", dense_steps=0, step_from="manual",
                 record=True, hoist=False, **kw)
    try:
        forward(model, inputs)
        dens = []
        for mm in h.recorded.values():
            m = mm.mask
            s = h.grid[0] * h.grid[1] * h.grid[2]
            qs, ks = td._geometry_sizes(mm.block, s)
            qs = torch.tensor(qs, device=m.device, dtype=torch.float64)
            ks = torch.tensor(ks, device=m.device, dtype=torch.float64)
            tok = (qs[:, None] * ks[None, :] * m.double()).sum((-1, -2)) / (s * s)
            dens.append(float(tok.mean()))
        return sum(dens) / len(dens)
    finally:
        h.remove()


def layer_check(model, inputs, method, kw):
    h = td.apply(model, method=method, backend="tessera", check="flex", dense_steps=0,
                 step_from="manual", hoist=False, **kw)
    try:
        forward(model, inputs)
        return [(layer, d / r if r else float("inf")) for _, layer, d, r in h.checks]
    finally:
        h.remove()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(CONFIGS))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--frames", type=int, default=None, help="video frames (default: the setting above)")
    ap.add_argument("--methods", default="vsa,sta,svg")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--compile", action="store_true",
                    help="time every case's steps through torch.compile(model), dense too")
    ap.add_argument("--json", default=None)
    ap.add_argument("--hoist", choices=("off", "on", "both"), default="off")
    ap.add_argument("--select-rows", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="cut-down configs on the CPU (no GPU)")
    a = ap.parse_args()
    global DEV, DT
    if a.smoke:
        DEV, DT = "cpu", torch.float32
    name = a.model
    c = CONFIGS[name]
    model, inputs = build(name, a.frames, a.smoke)
    from tessera import methods as M
    M._produce.ROWS = a.select_rows
    probe = inputs["hidden_states"]
    print(f"producers: {'fused kernels (tessera.produce)' if M._fused(probe) else 'torch path'} on "
          f"{probe.device} {probe.dtype}; select rows a CTA {a.select_rows or 'automatic'}; "
          f"hoist {a.hoist}", flush=True)
    rows, ok = [], True
    out = {"model": name, "gpu": torch.cuda.get_device_name() if DEV == "cuda" else "cpu", "cases": [],
           "fused_producers": M._fused(probe), "hoist": a.hoist, "select_rows": a.select_rows}
    # XAttention with apply()'s defaults (tau 0.9, stride 8, 128-token blocks).
    kws = {"vsa": dict(sparsity=0.875), "sta": c["sta"], "svg": c["svg"], "xattention": {}}
    methods = [m for m in a.methods.split(",") if m]
    for m in methods:
        if m not in kws:
            print(f"pipeline_bench: --methods: unknown method '{m}' (known: {', '.join(kws)})",
                  file=sys.stderr)
            return 2
    t0 = time.time()
    out["compiled"] = a.compile
    dense_ms, dprof, facts = case(model, inputs, None, None, a.reps, {}, a.compile)
    out["tokens"] = facts
    out["dense_profile"] = dprof
    print(f"dense: {dense_ms:.1f} ms/step, {dprof} ({time.time() - t0:.0f} s)", flush=True)
    rows.append(("dense (cuDNN SDPA)", 1.0, dense_ms, dprof.get("attention", 0.0), 0.0, 0.0, STEPS,
                 STEPS * dense_ms))
    for method in methods:
        kw = kws[method]
        try:
            dens = density_of(model, inputs, method, kw)
        except Exception as e:  # a method that cannot run here: say so, go on
            print(f"{method}: FAILED {type(e).__name__}: {e}", flush=True)
            ok = False
            continue
        warm = int(td.DENSE_WARMUP[method][0] * STEPS + 0.5)
        static = method in ("vsa", "sta")  # the methods with a hoistable order
        hoists = {"off": [False], "on": [True], "both": [False, True]}[a.hoist] if static else [False]
        if a.hoist == "both" and static:
            masks, bitwise, d = hoist_check(model, inputs, method, kw)
            out.setdefault("hoist_check", {})[method] = dict(masks_equal=masks, bitwise=bitwise, rel=d)
            print(f"hoist check {method}: masks {'equal' if masks else 'DIFFER'}, outputs "
                  f"{'bit for bit' if bitwise else f'differ (max rel {d:.1e})'}", flush=True)
        for backend, hoist in [(b_, h_) for b_ in ["tessera"] + ([] if a.no_flex else ["flex"])
                               for h_ in hoists]:
            t1 = time.time()
            label = f"{backend} {method}" + (" (hoisted)" if hoist else "")
            try:
                ms, prof, facts = case(model, inputs, method, backend, a.reps, dict(kw, hoist=hoist),
                                       a.compile)
            except Exception as e:
                print(f"{label}: FAILED {type(e).__name__}: {e}", flush=True)
                ok = False
                continue
            proj = warm * dense_ms + (STEPS - warm) * ms
            rows.append((label, dens, ms, prof.get("attention", 0.0),
                         prof.get("produce", 0.0), prof.get("flex_blockmask", 0.0), warm, proj))
            out["cases"].append(dict(backend=backend, method=method, params=kw, density=dens,
                                     step_ms=ms, profile=prof, dense_layers=facts["dense_layers"],
                                     warmup_steps=warm, projection_ms=proj, hoisted=facts["hoisted"]))
            print(f"{label}: {ms:.1f} ms/step, density {dens:.3f}, hoisted {facts['hoisted']}, {prof} "
                  f"({time.time() - t1:.0f} s)", flush=True)
        if not a.no_check and not a.no_flex:
            errs = layer_check(model, inputs, method, kw)
            worst = max(e for _, e in errs)
            good = worst < TOL
            ok &= good
            out.setdefault("checks", {})[method] = errs
            print(f"check {method}: {len(errs)} layers, Tessera vs FlexAttention max rel diff "
                  f"{worst:.2e} ({'ok' if good else 'FAIL'}, tol {TOL})", flush=True)
    out["dense_step_ms"] = dense_ms
    print()
    if a.compile:
        print("steps timed through torch.compile(model), every case")
    print(f"| {name} case | density | step ms | attention ms (share) | mask ms | flex BlockMask ms "
          f"| dense warm-up | 50 steps s | vs dense |")
    print("|---|---|---|---|---|---|---|---|---|")
    dproj = STEPS * dense_ms
    for label, dens, ms, att, prod, fbm, warm, proj in rows:
        print(f"| {label} | {dens:.3f} | {ms:.1f} | {att:.1f} ({att / ms:.0%}) | {prod:.1f} | {fbm:.1f} "
              f"| {warm} | {proj / 1e3:.1f} | {dense_ms / ms:.2f}x step, {dproj / proj:.2f}x 50 |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
