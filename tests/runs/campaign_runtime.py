"""A minimal agent runtime for the campaign test: sends one e-mail per recipient through the
Takeover API, keys derived from stable intent, subject and body generated afresh each time.

    python campaign_runtime.py URL TOKEN (--run RUN_ID | --claim) --event EVT --recipients N
                               [--hang-after K]

Prints "sent <i> <action id> <replayed> <content_changed> <state>" after each outcome; with
--hang-after it stops making progress after K e-mails (and waits to be killed), like a
wedged worker.
"""

import argparse
import random
import sys
import time

import httpx


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("token")
    p.add_argument("--run")
    p.add_argument("--claim", action="store_true")
    p.add_argument("--event", required=True)
    p.add_argument("--recipients", type=int, required=True)
    p.add_argument("--hang-after", type=int)
    args = p.parse_args()
    api = httpx.Client(
        base_url=f"{args.url}/api/v1",
        headers={"Authorization": f"Bearer {args.token}"},
        timeout=30,
    )
    run_id = args.run
    if args.claim:
        claimed = api.post("/runs/claim")
        claimed.raise_for_status()
        run_id = claimed.json()["id"]
    print(f"run {run_id}", flush=True)
    for i in range(args.recipients):
        if args.hang_after is not None and i >= args.hang_after:
            time.sleep(3600)
        recipient = f"customer-{i:03d}.{args.event}@example.com"
        # Generated content changes every time; the key never depends on it.
        subject = random.choice(["Your refund", "About your order", "Good news"])
        body = f"Dear customer {i}, {random.random():.6f}"
        key = f"{args.event}:send_email:{recipient}"
        response = api.post(
            f"/runs/{run_id}/actions",
            headers={"Idempotency-Key": key},
            json={
                "tool": "send_email",
                "target": recipient,
                "desired_state": {"campaign": args.event, "subject": subject, "body": body},
            },
        )
        response.raise_for_status()
        action = response.json()
        replayed, changed = action["replayed"], action["content_changed"]
        while action["state"] in {"queued", "dispatching", "unknown"}:
            action = api.get(f"/actions/{action['id']}", params={"wait": 10}).json()
        print(f"sent {i} {action['id']} {replayed} {changed} {action['state']}", flush=True)
    api.post(f"/runs/{run_id}/finish", json={"status": "success", "tools_called": ["send_email"]})
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
