"""`python -m rlog.daemon.rlogd`: rlogd, as `rlog cluster up` and the tests start it."""

from rlog.daemon.rlogd import main

if __name__ == "__main__":
    main()
