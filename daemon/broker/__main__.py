"""`python -m rlog.daemon.broker`: one broker process, as rlogd starts it."""

from rlog.daemon.broker.main import main

if __name__ == "__main__":
    main()
