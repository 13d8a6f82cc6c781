"""service.responses.threads.one_thread_if: a small miss computes on one OpenMP thread of its own
thread, and the thread's count is back afterwards (also after an error)."""

from __future__ import annotations

import threading

import pytest
import torch

from service.responses.threads import libgomp, one_thread_if


@pytest.mark.skipif(libgomp() is None, reason="torch is not built with GNU OpenMP here")
def test_small_computes_on_one_thread_and_the_count_comes_back() -> None:
    seen: dict[str, int] = {}

    def work() -> None:
        torch.set_num_threads(2)
        seen["before"] = torch.get_num_threads()
        with one_thread_if(True):
            seen["small"] = torch.get_num_threads()
        with one_thread_if(False):
            seen["large"] = torch.get_num_threads()
        try:
            with one_thread_if(True):
                raise ValueError("boom")
        except ValueError:
            pass
        seen["after"] = torch.get_num_threads()

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == {"before": 2, "small": 1, "large": 2, "after": 2}
