from hermes_keeper.cli import main

main()
