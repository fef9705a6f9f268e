"""One worker of test_concurrent_mixed_operations: random stores (tmp +
rename), loads, unlinks, unlinks of open files and churn in a shared
directory, checked against the worker's own model of its directory.

usage: mixed_worker.py BASE WORKER_ID SECONDS MODEL_OUT
Exit 0 with the model (key -> [version, size]) written to MODEL_OUT as JSON;
exit 1 with a message on the first mismatch.
"""
import json
import os
import random
import sys
import time


def data(key, version, size):
    return random.Random(f"{key}/{version}").randbytes(size)


def main():
    base, wid, seconds, model_out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    rnd = random.Random(wid)
    mine = os.path.join(base, f"w{wid}")
    shared = os.path.join(base, "shared")
    os.makedirs(mine, exist_ok=True)
    os.makedirs(shared, exist_ok=True)
    model = {}
    ops = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ops += 1
        op = rnd.random()
        key = f"k{rnd.randrange(30)}"
        path = os.path.join(mine, key)
        if op < 0.35:  # store: tmp, writes of mixed sizes, maybe fsync, rename
            version = rnd.randrange(1 << 30)
            size = rnd.choice([0, 1, 4095, 4096, 65536, 1 << 20, (1 << 20) + 7, 3 << 20])
            fd = os.open(path + ".tmp", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            view = memoryview(data(key, version, size))
            while view:
                view = view[os.write(fd, view[: rnd.choice([4096, 1 << 20, 8 << 20])]):]
            if rnd.random() < 0.1:
                os.fsync(fd)
            os.close(fd)
            os.rename(path + ".tmp", path)
            model[key] = (version, size)
        elif op < 0.7:  # load or miss
            if key in model:
                with open(path, "rb") as f:
                    got = f.read()
                if got != data(key, *model[key]):
                    sys.exit(f"w{wid}: {key}: {len(got)} bytes differ from the stored "
                             f"{model[key][1]}")
            elif os.path.exists(path):
                sys.exit(f"w{wid}: {key} exists after unlink")
        elif op < 0.8:
            if key in model:
                os.unlink(path)
                del model[key]
        elif op < 0.9:  # contended names in a shared directory
            name = os.path.join(shared, f"s{rnd.randrange(10)}")
            try:
                if rnd.random() < 0.5:
                    with open(f"{name}.{wid}", "wb") as f:
                        f.write(b"x" * rnd.randrange(10000))
                    os.rename(f"{name}.{wid}", name)
                else:
                    os.unlink(name)
            except FileNotFoundError:
                pass
            names = os.listdir(shared)
            if len(names) != len(set(names)):
                sys.exit(f"w{wid}: duplicate names in a listing: {sorted(names)}")
        elif key in model:  # unlink while open, then read it all
            fd = os.open(path, os.O_RDONLY)
            os.unlink(path)
            expect = data(key, *model.pop(key))
            chunks = []
            while True:
                c = os.read(fd, 1 << 20)
                if not c:
                    break
                chunks.append(c)
            os.close(fd)
            if b"".join(chunks) != expect:
                sys.exit(f"w{wid}: {key}: unlinked open file reads wrong bytes")
    with open(model_out, "w") as f:
        json.dump(model, f)
    print(f"w{wid}: {ops} operations")


if __name__ == "__main__":
    main()
