"""Ctrl-C during a kcal command: one line, exit code 130, and no traceback from anyone.

Kept apart from the subcommands: it is about signals, threads and loggers, not about kcal's work.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading

from kcal_pipeline.core.filesystem_errors import KIND_OF_TEXT

INTERRUPTED = "interrupted; the next run resumes from the partition checkpoints"
_INTERRUPT_ERRORS = ("KeyboardInterrupt", "DagsterExecutionInterruptedError")


def is_interrupt(exc: BaseException) -> bool:
    return any(cls.__name__ in _INTERRUPT_ERRORS for cls in type(exc).__mro__)


def _not_an_interrupt_report(record: logging.LogRecord) -> bool:
    """False for Dagster's report of an interrupted step or run (an error with its stack trace)."""
    return record.levelno < logging.ERROR or not any(n in str(record.msg) for n in _INTERRUPT_ERRORS)


def _not_a_logged_interrupt(record: logging.LogRecord) -> bool:
    """False for a record that carries a Ctrl-C as its exception: SQLAlchemy's pool logs one that
    lands while it closes a connection ("Exception closing connection" and a traceback)."""
    error = record.exc_info[1] if record.exc_info else None
    return error is None or not (isinstance(error, KeyboardInterrupt) or is_interrupt(error))


# Loggers that can report a Ctrl-C with its traceback, when made before the command started.
IMPORT_TIME_LOGGERS = ("sqlalchemy",)


def _import_time_loggers() -> list[logging.Logger]:
    return [
        logger
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and name.startswith(IMPORT_TIME_LOGGERS)
    ]


def _not_a_storage_report(record: logging.LogRecord) -> bool:
    """False for Dagster's report, with its stack trace, of a step or resource that the file system
    refused (read-only, no permission, full): the command ends with one line saying it (main)."""
    return record.levelno < logging.ERROR or not any(words in str(record.msg) for words in KIND_OF_TEXT)


class _QuietOnInterrupt(logging.Logger):
    """The class of loggers made while a kcal command runs, Dagster's console logger and SQLAlchemy's
    (imported on first use) among them: they drop Dagster's reports of an interruption or of a
    refusing file system (the instance's event log still has them, where it can be written) and any
    record whose exception is the Ctrl-C."""

    def __init__(self, name: str, level: int | str = logging.NOTSET) -> None:
        super().__init__(name, level)
        self.addFilter(_not_an_interrupt_report)
        self.addFilter(_not_a_storage_report)
        self.addFilter(_not_a_logged_interrupt)


class CtrlC:
    """Ctrl-C ends a command with one line and exit code 130, and no traceback from anyone.

    The terminal sends SIGINT to the whole process group, so also to the processes kcal started,
    among them the `tail` and Python watcher that mirror each Dagster run's captured output (the
    watchers would print a KeyboardInterrupt traceback each). While the command runs, SIGINT is
    blocked in the main thread, so every child inherits it blocked; one of kcal's other threads
    takes the signal, Python runs the handler in the main thread as always (Dagster's, during a
    run: it stops the step, fails the run and tears its resources down) and a watcher thread,
    woken through signal.set_wakeup_fd, pokes the main thread with POKE so that a blocking call
    (an HTTP request, a sleep) returns at once. Dagster's console report of the interruption is
    dropped (_QuietOnInterrupt). Off the main thread or without pthread_sigmask a plain
    KeyboardInterrupt still ends in the same line.
    """

    POKE = getattr(signal, "SIGUSR2", None)
    active: CtrlC | None = None  # the running command's

    def __init__(self) -> None:
        self.pressed = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> CtrlC:
        CtrlC.active = self
        self._logger_class = logging.getLoggerClass()
        logging.setLoggerClass(_QuietOnInterrupt)
        self._filtered = _import_time_loggers()
        for logger in self._filtered:
            logger.addFilter(_not_a_logged_interrupt)
        usable = self.POKE is not None and hasattr(signal, "pthread_sigmask")
        if not usable or threading.current_thread() is not threading.main_thread():
            return self
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._wakeup = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._poke_handler = signal.signal(self.POKE, lambda signum, frame: None)
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        # The poke must reach the main thread even if the caller's mask blocks it.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {self.POKE})
        self._thread = threading.Thread(target=self._watch, name="kcal-ctrl-c", daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        # Unblocked here, so some thread can always take SIGINT (the main thread blocks it).
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        main = threading.main_thread().ident
        pokes = 0
        while True:
            # After Ctrl-C the main thread is poked a few more times, 0.2 s apart, in case one poke
            # landed just before a blocking call began; bounded, since each poke interrupts a syscall.
            retry = self.pressed and pokes < 10
            ready, _, _ = select.select([self._read], [], [], 0.2 if retry else None)
            if retry:
                pokes += 1
                signal.pthread_kill(main, self.POKE)
            if not ready:
                continue
            data = os.read(self._read, 64)
            if signal.SIGINT in data or signal.SIGTERM in data:
                self.pressed = True
                signal.pthread_kill(main, self.POKE)
            if not data or b"\xff" in data:  # __exit__: the command is over
                return

    def __exit__(self, *exc) -> bool:
        if self._thread is not None:
            os.write(self._write, b"\xff")
            self._thread.join()
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
            signal.signal(self.POKE, self._poke_handler)
            signal.set_wakeup_fd(self._wakeup)
            os.close(self._read)
            os.close(self._write)
        logging.setLoggerClass(self._logger_class)
        for logger in self._filtered:
            logger.removeFilter(_not_a_logged_interrupt)
        CtrlC.active = None
        return False


def log_unless_interrupted(message: str) -> None:
    """run_missing's log, called between two Dagster runs. Dagster raises a Ctrl-C in user code (a
    step, an IO manager, a resource) and defers one that comes during its own bookkeeping to the
    next user code; one that comes after a run's last user code is dropped when the run ends. Such
    a Ctrl-C stops the command here, before the next run."""
    if CtrlC.active is not None and CtrlC.active.pressed:
        raise KeyboardInterrupt
    print(message)
