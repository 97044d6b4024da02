"""SiLU as an NKI kernel for one NeuronCore: rows go onto the 128 SBUF partitions one tile at a
time; each tile is loaded from HBM, computed as x * sigmoid(x) and stored back.

A plain baseline: the sigmoid runs on the scalar engine and the multiply on the vector engine, one
tile after the other, so there is room left (nl.silu in one activation, larger tiles)."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(x):
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    tile_rows = nl.tile_size.pmax
    for t in nl.affine_range(rows // tile_rows):
        tile = nl.load(x[t * tile_rows : (t + 1) * tile_rows, :])
        activated = nl.multiply(tile, nl.sigmoid(tile))
        nl.store(out[t * tile_rows : (t + 1) * tile_rows, :], value=activated)
    return out
