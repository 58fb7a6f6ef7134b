"""How the emulator's processes end with the test that started them, even a
killed one.
"""
import os
import threading
import time


def exit_with_parent(on_exit):
    """Calls on_exit() once the process that started us is gone (we were
    re-parented), so a killed test run leaves no emulator behind."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        on_exit()
    threading.Thread(target=watch, daemon=True).start()
