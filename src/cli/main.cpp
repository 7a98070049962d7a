int main() { return 0; }  // placeholder; the CLI helper replaces this file
