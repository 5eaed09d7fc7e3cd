from kselect.cli import main

main()
