"""Create or rotate the pass-token keys for a Kubernetes deployment of candor.

The gate signs pass tokens with an Ed25519 private key (Secret ``candor-signing-key``: keys
``signing-key.pem`` and ``key-id``, mounted only into gate pods); the generator verifies them
with every ``<kid>.pub.pem`` in ConfigMap ``candor-token-public-keys`` (mounted only into
generator pods). Keys never enter the repository.

    python scripts/k8s_token_keys.py --kid candor-1 --out ~/candor-keys/prod --namespace candor

writes ``<out>/<kid>.pem`` (0600) and ``<out>/public/<kid>.pub.pem`` and prints the kubectl
commands that create/update the Secret and the ConfigMap. Every public key already in
``<out>/public/`` stays in the ConfigMap, so a rotation is: run it with a new --kid, apply the
ConfigMap and restart the generators, then apply the Secret and restart the gates, then (after
the token TTL) delete the old public key file and apply the ConfigMap again
(docs/operations.md "Rotate the signing key").
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

from candor.token import load_or_create_signing_key, write_public_key

KID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kid", required=True, help="key id for the new key, e.g. candor-2")
    ap.add_argument("--out", required=True, type=Path, help="directory outside the repository")
    ap.add_argument("--namespace", default="candor")
    args = ap.parse_args(argv)
    if not KID.match(args.kid):
        ap.error("--kid: letters, digits, '.', '_' and '-' only")
    out: Path = args.out.expanduser().resolve()
    if (Path(__file__).resolve().parents[1] / ".git").exists() and out.is_relative_to(
        Path(__file__).resolve().parents[1]
    ):
        ap.error("--out must be outside the repository: private keys never get committed")
    private = out / f"{args.kid}.pem"
    existed = private.exists()
    key = load_or_create_signing_key(private)
    public_dir = out / "public"
    write_public_key(key, public_dir, args.kid)
    publics = sorted(public_dir.glob("*.pub.pem"))
    ns = shlex.quote(args.namespace)
    print(f"{'kept' if existed else 'created'} {private} (kid {args.kid})", file=sys.stderr)
    print(f"public keys: {', '.join(p.name for p in publics)}", file=sys.stderr)
    files = " ".join(f"--from-file={shlex.quote(str(p))}" for p in publics)
    print(
        "# 1. generator: every public key (apply, then restart so pods load the new set)\n"
        f"kubectl -n {ns} create configmap candor-token-public-keys {files} "
        "--dry-run=client -o yaml | kubectl apply -f -\n"
        f"kubectl -n {ns} rollout restart deployment/candor-generator && "
        f"kubectl -n {ns} rollout status deployment/candor-generator\n"
        "# 2. gate: the private key and its id (only after step 1 has finished)\n"
        f"kubectl -n {ns} create secret generic candor-signing-key "
        f"--from-file=signing-key.pem={shlex.quote(str(private))} "
        f"--from-literal=key-id={shlex.quote(args.kid)} "
        "--dry-run=client -o yaml | kubectl apply -f -\n"
        f"kubectl -n {ns} rollout restart deployment/candor-gate && "
        f"kubectl -n {ns} rollout status deployment/candor-gate"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
