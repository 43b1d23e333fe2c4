#!/usr/bin/env python3
"""CPU model of the 64-row prefill tile's warp math (common/wide_tile_attention.cuh and
sparse_prefill/wide_kernel.cuh as on branch prefill-wide-16-warps) for 8 or 16 warps, written by a
session-6 reviewer to check the 16-warp variant without a GPU: it repeats the kernel's address and
index arithmetic, models ldmatrix(.trans) and mma.m16n8k16 with the PTX ISA's fragment layouts,
runs one CTA over 3 blocks (one fully invalid, others partly) and compares out / lse / max_logits
with a plain attention reference; it also asserts that every output and exchange slot is written
once and that each named barrier id is used by exactly two warps.

    python3 scripts/experiments/wide_tiling_model.py WARPS [SEED] [DQK]   (WARPS 8 or 16; DQK 576|512)

Session 6: 8 and 16 warps both give out max error ~9e-4 (bf16 P), lse ~1e-15; two deliberately
broken index variants failed. A model, not the kernel: the GPU tests are the check.
"""
import numpy as np, sys
rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
W = int(sys.argv[1]); DQK = int(sys.argv[3]) if len(sys.argv) > 3 else 576; ROWS = 64; BK = 64
KG = W // 4; KGS = 1 if KG == 2 else 2; KPW = 64 // KG; KT = KPW // 8; CPW = 512 // W; CT = CPW // 8
TPR = W * 32 // 64; TPRS = KGS + 1; PANELS = DQK // 64; CHUNKS = DQK // 8
def tco(kRows, row, chunk): return (chunk >> 3) * (kRows * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4)
class Lane:
  def __init__(s, tile, row, bit): s.base = tile + row * 128; s.x = bit ^ (row & 7)
  def at(s, kRows, c8): return s.base + (c8 >> 3) * (kRows * 128) + (((c8 & 7) ^ s.x) << 4)
SM = np.full(300000 // 2, np.nan)  # bf16 values by byte offset / 2
Q0, KV0, P0 = 0, 73728, 73728 * 3
def ldsm(addrs, trans=False):
  # addrs[lane]: row address of row lane%8 of matrix lane//8; returns r[lane][j] = (e0, e1)
  r = [[None] * 4 for _ in range(32)]
  for lane in range(32):
    gq, t = lane >> 2, lane & 3
    for j in range(4):
      if not trans:
        a = addrs[8 * j + gq]; r[lane][j] = (SM[a // 2 + 2 * t], SM[a // 2 + 2 * t + 1])
      else:
        r[lane][j] = (SM[addrs[8 * j + 2 * t] // 2 + gq], SM[addrs[8 * j + 2 * t + 1] // 2 + gq])
  return r
def mma(c, a, b0, b1):  # c[lane][4], a[lane][4] pairs, b0/b1[lane] pairs
  A = np.zeros((16, 16)); B = np.zeros((16, 8))
  for lane in range(32):
    gq, t = lane >> 2, lane & 3
    for i in range(2):
      A[gq, 2 * t + i] = a[lane][0][i]; A[gq + 8, 2 * t + i] = a[lane][1][i]
      A[gq, 2 * t + 8 + i] = a[lane][2][i]; A[gq + 8, 2 * t + 8 + i] = a[lane][3][i]
      B[2 * t + i, gq] = b0[lane][i]; B[2 * t + 8 + i, gq] = b1[lane][i]
  assert not np.isnan(A).any() and not np.isnan(B).any()
  C = A @ B
  for lane in range(32):
    gq, t = lane >> 2, lane & 3
    c[lane][0] += C[gq, 2 * t]; c[lane][1] += C[gq, 2 * t + 1]
    c[lane][2] += C[gq + 8, 2 * t]; c[lane][3] += C[gq + 8, 2 * t + 1]
def bf16(x):
  x = np.asarray(x, np.float32).copy(); u = x.view(np.uint32)
  u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32); return u.view(np.float32).astype(np.float64)
def place(warp):
  return dict(g=warp >> (KGS + 1), rh=(warp >> KGS) & 1, kh=warp & (KG - 1), col0=CPW * warp)
def gather(tile, thread, rowdata):
  row = thread >> TPRS
  for j in range(CHUNKS // TPR):
    chunk = (thread & (TPR - 1)) + TPR * j
    off = tile + tco(ROWS, row, chunk)
    SM[off // 2: off // 2 + 8] = rowdata[row][8 * chunk: 8 * chunk + 8]
# problem
nblocks = 3; scale = 0.0416
Q = bf16(rng.standard_normal((64, DQK)))
KV = bf16(rng.standard_normal((nblocks * 64, DQK)))
valid = rng.random(nblocks * 64) < 0.8
valid[64:128] = False  # a fully invalid block
valid[5] = False
for thread in range(W * 32): gather(Q0, thread, Q)
acc_o = [[np.zeros((4, CT, 4)) for _ in range(32)] for _ in range(W)]
acc_m = [[[-np.inf] * 2 for _ in range(32)] for _ in range(W)]
acc_l = [[[0.0] * 2 for _ in range(32)] for _ in range(W)]
scratch_owner = {}
for blk in range(nblocks):
  SM[KV0:KV0 + 73728] = np.nan  # forget the tile
  for thread in range(W * 32): gather(KV0, thread, KV[64 * blk:64 * blk + 64])
  vflags = np.zeros(64, np.uint8)
  for thread in range(W * 32):
    if (thread & (TPR - 1)) == 0: vflags[thread >> TPRS] = valid[64 * blk + (thread >> TPRS)]
  # score
  S = {}
  for warp in range(W):
    p = place(warp); s = [[[[0.0] * 4 for _ in range(32)] for _ in range(KT)] for _ in range(2)]
    al = [[None] * 32 for _ in range(2)]
    for mt in range(2):
      for lane in range(32):
        L = Lane(Q0, 32 * p['rh'] + 16 * mt + (lane & 15), lane >> 4); L.x ^= 4 * p['g']; al[mt][lane] = L
    bl = []
    for lane in range(32):
      L = Lane(KV0, KPW * p['kh'] + ((lane >> 4) << 3) + (lane & 7), (lane >> 3) & 1); L.x ^= 4 * p['g']; bl.append(L)
    for panel in range(PANELS):
      for step in range(2):
        c8 = panel * 8 + 2 * step
        a = [ldsm([al[mt][l].at(ROWS, c8) for l in range(32)]) for mt in range(2)]
        b = [ldsm([bl[l].at(BK, c8) + kp * 16 * 128 for l in range(32)]) for kp in range(KT // 2)]
        for mt in range(2):
          for kp in range(KT // 2):
            mma(s[mt][2 * kp], a[mt], [b[kp][l][0] for l in range(32)], [b[kp][l][1] for l in range(32)])
            mma(s[mt][2 * kp + 1], a[mt], [b[kp][l][2] for l in range(32)], [b[kp][l][3] for l in range(32)])
    S[warp] = s
  # exchange (scratch: floats of the P tile, 2048 of them)
  scratch = {}
  own = {}
  KV_ = 4 * KT; used_ids = {}
  for warp in range(W):
    p = place(warp); slot = KG * p['rh'] + p['kh']; sent = 1 + slot; ret = 5 + slot if W == 8 else sent
    used_ids.setdefault((sent, ret), set()).add(warp)
    for lane in range(32):
      for e in range(KV_):
        idx = slot * 32 * KV_ + lane + 32 * e; assert 0 <= idx < 2048
        key = (idx)
        scratch.setdefault(key, set()).add((warp, lane))
  for k, v in used_ids.items(): assert len(v) == 2, (k, v)
  ids = [i for k in used_ids for i in k]; assert max(ids) <= 15 and min(ids) >= 1
  for k, v in scratch.items():
    lanes = {l for (_, l) in v}; ws = {w for (w, _) in v}
    assert len(v) == 2 and len(lanes) == 1 and len({place(w)['g'] for w in ws}) == 2, (k, v)
  for warp in range(W):
    p = place(warp)
    partner = [w for w in range(W) if w != warp and place(w)['rh'] == p['rh'] and place(w)['kh'] == p['kh']]
    assert len(partner) == 1; pw = partner[0]
    mine, theirs = S[warp], S[pw]
    g = p['g']
    own[warp] = [[[mine[g][nt][l][i] + theirs[g][nt][l][i] for i in range(4)] for nt in range(KT)] for l in range(32)]
  # softmax
  red = np.full((KG, 64), np.nan); alpha = np.full(64, np.nan); Pt = np.nan
  SM[P0 // 2: P0 // 2 + 4096] = np.nan
  for warp in range(W):
    p = place(warp); orow = 32 * p['rh'] + 16 * p['g']
    for lane in range(32):
      gq, t = lane >> 2, lane & 3
      for half in range(2):
        for nt in range(KT):
          for i in range(2):
            ok = vflags[KPW * p['kh'] + 8 * nt + 2 * t + i] != 0
            v = own[warp][lane][nt][2 * half + i]
            own[warp][lane][nt][2 * half + i] = v * scale if ok else -np.inf
  for warp in range(W):
    p = place(warp); orow = 32 * p['rh'] + 16 * p['g']
    for lane in range(0, 32, 4):
      gq = lane >> 2
      for half in range(2):
        rm = max(own[warp][lane + tt][nt][2 * half + i] for tt in range(4) for nt in range(KT) for i in range(2))
        assert np.isnan(red[p['kh'], orow + 8 * half + gq]); red[p['kh'], orow + 8 * half + gq] = rm
  assert not np.isnan(red).any()
  for warp in range(W):
    p = place(warp); orow = 32 * p['rh'] + 16 * p['g']
    for lane in range(32):
      gq, t = lane >> 2, lane & 3
      for half in range(2):
        row = orow + 8 * half + gq
        m_old = acc_m[warp][lane][half]; bm = red[:, row].max(); m_new = max(m_old, bm)
        m_use = 0.0 if m_new == -np.inf else m_new
        a = np.exp2(m_old - m_use); acc_m[warp][lane][half] = m_new; ssum = 0.0
        for nt in range(KT):
          for i in range(2):
            v = np.exp2(own[warp][lane][nt][2 * half + i] - m_use); own[warp][lane][nt][2 * half + i] = v; ssum += v
        acc_l[warp][lane][half] = acc_l[warp][lane][half] * a + ssum
        if p['kh'] == 0 and t == 0: assert np.isnan(alpha[row]); alpha[row] = a
        for nt in range(KT):
          off = P0 + tco(ROWS, row, KT * p['kh'] + nt) + 4 * t
          assert np.isnan(SM[off // 2]) and np.isnan(SM[off // 2 + 1])
          SM[off // 2] = bf16(own[warp][lane][nt][2 * half]); SM[off // 2 + 1] = bf16(own[warp][lane][nt][2 * half + 1])
  assert not np.isnan(alpha).any() and not np.isnan(SM[P0 // 2:P0 // 2 + 4096]).any()
  # accumulate
  for warp in range(W):
    p = place(warp)
    for lane in range(32):
      gq = lane >> 2
      for mt in range(4):
        for half in range(2):
          acc_o[warp][lane][mt, :, 2 * half:2 * half + 2] *= alpha[16 * mt + 8 * half + gq]
    al = [[Lane(P0, 16 * mt + (l & 15), l >> 4) for l in range(32)] for mt in range(4)]
    for kk in range(BK // 16):
      a = [ldsm([al[mt][l].at(ROWS, 2 * kk) for l in range(32)]) for mt in range(4)]
      bl = [Lane(KV0, kk * 16 + ((l >> 3) & 1) * 8 + (l & 7), l >> 4) for l in range(32)]
      for np_ in range(CT // 2):
        b = ldsm([bl[l].at(BK, (p['col0'] >> 3) + 2 * np_) for l in range(32)], trans=True)
        for mt in range(4):
          c0 = [list(acc_o[warp][l][mt, 2 * np_]) for l in range(32)]
          c1 = [list(acc_o[warp][l][mt, 2 * np_ + 1]) for l in range(32)]
          mma(c0, a[mt], [b[l][0] for l in range(32)], [b[l][1] for l in range(32)])
          mma(c1, a[mt], [b[l][2] for l in range(32)], [b[l][3] for l in range(32)])
          for l in range(32): acc_o[warp][l][mt, 2 * np_] = c0[l]; acc_o[warp][l][mt, 2 * np_ + 1] = c1[l]
# store
red = np.full((KG, 64), np.nan)
for warp in range(W):
  p = place(warp); orow = 32 * p['rh'] + 16 * p['g']
  for lane in range(0, 32, 4):
    for half in range(2):
      r = orow + 8 * half + (lane >> 2); assert np.isnan(red[p['kh'], r])
      red[p['kh'], r] = sum(acc_l[warp][lane + tt][half] for tt in range(4))
out_scale = np.full(64, np.nan); lse = np.full(64, np.nan); mx = np.full(64, np.nan)
for warp in range(W):
  p = place(warp)
  if p['kh'] != 0: continue
  orow = 32 * p['rh'] + 16 * p['g']
  for lane in range(0, 32, 4):
    for half in range(2):
      r = orow + 8 * half + (lane >> 2); l = red[:, r].sum(); m = acc_m[warp][lane][half]
      assert np.isnan(out_scale[r]); out_scale[r] = 1 / l; lse[r] = (m + np.log2(l)) * np.log(2); mx[r] = m * np.log(2)
out = np.full((64, 512), np.nan)
for warp in range(W):
  p = place(warp)
  for lane in range(32):
    col = p['col0'] + 2 * (lane & 3)
    for mt in range(4):
      for half in range(2):
        row = 16 * mt + 8 * half + (lane >> 2)
        for n in range(CT):
          for i in range(2):
            assert np.isnan(out[row, col + 8 * n + i]); out[row, col + 8 * n + i] = acc_o[warp][lane][mt, n, 2 * half + i] * out_scale[row]
assert not np.isnan(out).any()
# reference
logits = (Q @ KV.T) * 1.0
logits[:, ~valid] = -np.inf
l2 = logits * scale
mref = l2.max(1); pr = np.exp2(l2 - mref[:, None]); lref = pr.sum(1)
oref = (pr @ KV[:, :512]) / lref[:, None]
print(W, 'out maxerr', np.abs(out - oref).max(), 'rel', np.abs(out - oref).max() / np.abs(oref).max(),
      'lse err', np.abs(lse - (mref + np.log2(lref)) * np.log(2)).max(), 'max err', np.abs(mx - mref * np.log(2)).max())
