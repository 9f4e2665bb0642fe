"""`python -m rlog.daemon.controller`: the controller process, as rlogd starts it."""

from rlog.daemon.controller.main import main

if __name__ == "__main__":
    main()
