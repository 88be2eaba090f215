"""The `flawforge` command's entry point. Importing the command's modules takes a fraction of a second; a Ctrl-C
then ends the command as it does later, with one line and status 130, not an import's traceback."""
import sys

INTERRUPTED = 130  # the status of a command ended by Ctrl-C (128 + SIGINT), as shells report one


def interrupted() -> int:
    """Says that the command was interrupted, with nothing more to say of its work; its exit status."""
    print("flawforge: interrupted", file=sys.stderr)
    return INTERRUPTED


def main() -> None:
    try:
        from flawforge.cli.main import main as run_command
    except KeyboardInterrupt:
        sys.exit(interrupted())
    run_command()


if __name__ == "__main__":
    main()
