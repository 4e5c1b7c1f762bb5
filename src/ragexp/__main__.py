from ragexp.app import main

main()
