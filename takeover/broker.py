"""The serverless default broker: kombu's filesystem transport, made safe for several
processes.

Two races in kombu's own version (see kombu issue #1551) and what is done about them:
- `_put` creates the message file and then writes it, so a consumer can pick up an empty
  file and crash the worker with a JSONDecodeError. Here the message is written to a hidden
  temporary name and renamed into place: it appears whole or not at all.
- `_get` claims a message by moving it to the system temp dir, which may be another file
  system (a copy, not an atomic rename), so two consumers could both get it. Here it is
  renamed within the broker directory: exactly one consumer wins.
Either way a duplicate would only cost a no-op (claiming an action is a conditional UPDATE),
but a crashed worker costs everything.
"""

import os
import uuid
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        temporary = os.path.join(self.data_folder_out, f".{uuid.uuid4()}.tmp")
        try:
            with open(temporary, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(temporary, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc

    def _get(self, queue):
        wanted = f"{queue}.msg"
        claimed_dir = os.path.join(self.processed_folder, "claimed")
        try:
            names = sorted(os.listdir(self.data_folder_in))
        except OSError:
            raise Empty() from None  # the directory is away (unmounted, moved): wait for it
        for name in names:
            if name.partition(".")[2] != wanted:
                continue
            claimed = os.path.join(claimed_dir, name)
            try:
                # Made when there is a message to claim, not at every poll (several a
                # second, mostly empty).
                os.makedirs(claimed_dir, exist_ok=True)
                os.rename(os.path.join(self.data_folder_in, name), claimed)
            except OSError:
                continue  # another consumer took it first
            try:
                with open(claimed, "rb") as f:
                    payload = f.read()
                os.remove(claimed)
            except OSError as exc:
                raise ChannelError(f"Cannot read file {claimed!r} from queue.") from exc
            return loads(bytes_to_str(payload))
        raise Empty()


class Transport(filesystem.Transport):
    Channel = Channel
