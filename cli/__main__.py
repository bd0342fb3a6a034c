from portside.cli.main import main

main()
