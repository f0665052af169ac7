// turnstile: the command-line client (docs/cli.md).
#include "client/cli.h"

int main(int argc, char** argv) { return turnstile::client::run_cli(argc, argv); }
