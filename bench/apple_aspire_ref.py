"""ASPIRE's APPLE picker on one micrograph: the reference bench/apple measures starpipe against.

Runs aspire.apple.Apple(particle_size).process_micrograph_centers(MRC) with
ASPIRE's defaults, in the same sitting as starpipe, and writes the centres
it picks (x y, one per line, in the micrograph's pixels) to OUT.

Not a dependency of starpipe: ASPIRE comes from PyPI into a virtual
environment of the benchmark's own (bench/apple names it with ASPIRE_PYTHON).

Usage: python bench/apple_aspire_ref.py MRC PARTICLE_SIZE THREADS OUT
Prints: seconds (wall) and the number of picks.
"""
import logging
import os
import sys
import tempfile
import time

logging.disable(logging.INFO)

import mrcfile  # noqa: E402

from aspire.apple.apple import Apple  # noqa: E402


def without_pixel_size(mrc, tmp):
    """A copy of mrc with no pixel size in its header: ASPIRE 0.14.3's APPLE
    refuses a micrograph whose header has one ("Mismatched pixel size"), as
    starpipe-apple-sim's have.  The data are copied unchanged, untimed."""
    with mrcfile.open(mrc, permissive=True) as m:
        data = m.data.copy()
    out = os.path.join(tmp, os.path.basename(mrc))
    with mrcfile.new(out, overwrite=True) as m:
        m.set_data(data)
        m.voxel_size = 0
    return out


def main():
    mrc, size, threads, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    with tempfile.TemporaryDirectory() as tmp:
        mrc = without_pixel_size(mrc, tmp)
        t0 = time.perf_counter()
        apple = Apple(particle_size=size, output_dir=tmp, conv_map_nthreads=threads)
        centers = apple.process_micrograph_centers(mrc)
        t1 = time.perf_counter()
    with open(out, "w") as f:
        for c in centers:
            f.write("%g %g\n" % (c[0], c[1]))
    print("%.3f %d" % (t1 - t0, len(centers)))


if __name__ == "__main__":
    main()
