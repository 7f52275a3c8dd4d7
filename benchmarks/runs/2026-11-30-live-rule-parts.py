import json, collections
import numpy as np

def fires_newest(floors, noise, frames, change=0.05, lookback=30):
    """The shipped rule's reading: at point i the floor F_i at both ends of the window."""
    for i in range(len(frames)):
        F = floors[i]
        if not np.isfinite(F) or F >= 1:
            continue
        now = frames[i]
        before = [j for j in range(i + 1) if frames[j] <= now - lookback]
        if not before:
            continue
        j = before[-1]
        a = 1 - (1 - F) * (1 - noise[j]); b = 1 - (1 - F) * (1 - noise[i])
        if np.isfinite(a) and np.isfinite(b) and a > 0 and (a - b) / a < change:
            return now
    return None

rows = collections.defaultdict(list)
for name in ("fresh3", "fresh4"):
    d = json.load(open(f"/tmp/expected/{name}.json"))
    stacks = {s["stack"]: s for s in d["stacks"]}
    for r in d["realizations"]:
        s = stacks[r["stack"]]
        frames = r["frames"]; track = r["track"]
        e = s["expected truth"]
        e_true = np.array(r["errors"], float)
        rsp = np.array([p["rsp_error"] for p in track], float)
        noise = np.array([p["noise"] for p in track], float)
        with np.errstate(invalid="ignore", divide="ignore"):
            f_impl = 1 - (1 - e_true) / (1 - noise)
        F_true = float(np.nanmedian(f_impl[np.array(frames) >= 30]))
        noise_true = 1 - (1 - e_true) / (1 - F_true)
        exp_err = np.array(s["expected error"], float)
        with np.errstate(invalid="ignore", divide="ignore"):
            F_exp = float(np.nanmedian((1 - (1 - exp_err) / (1 - noise))[np.array(frames) >= 30]))
        variants = {
            "shipped (7 x RSP, halves)": (7 * rsp, noise),
            "true floor, halves": (np.full(len(frames), F_true), noise),
            "expected-curve floor, halves": (np.full(len(frames), F_exp), noise),
            "7 x RSP, true noise": (7 * rsp, noise_true),
            "true floor, true noise": (np.full(len(frames), F_true), noise_true),
        }
        for k, (fl, nz) in variants.items():
            rows[k].append((r["stack"], fires_newest(fl, nz, frames), e))
print("reproduces the helper's 51/192 for the shipped rule if the first line says so")
for k, items in rows.items():
    fired = [(s, f, e) for s, f, e in items if f is not None]
    agree = sum(abs(f - e) <= 0.1 * e for s, f, e in fired)
    off = np.mean([abs(f - e) for s, f, e in fired])
    per = collections.defaultdict(list); exp = {}
    for s, f, e in fired:
        per[s].append(f); exp[s] = e
    xs = [np.mean(v) for v in per.values()]; ys = [exp[s] for s in per]
    print(f"{k:32s} within 10 %: {agree}/{len(items)} (fired {len(fired)}), off {off:.1f}, "
          f"per-sample corr {np.corrcoef(xs, ys)[0, 1]:.2f}, mean frame {np.mean([f for _, f, _ in fired]):.0f}")
