/* main_mkmodel.c — entry point of `ds4cl-mkmodel`: writes DS4-layout GGUF
 * fixtures. */
#include <stdio.h>
#include <string.h>

static void help(void)
{
    fputs("ds4cl-mkmodel " DS4CL_VERSION " — write a DS4-layout GGUF fixture\n"
          "\n"
          "usage: ds4cl-mkmodel -o OUT.gguf [--preset tiny|flash-width] [--layers N]\n"
          "                     [--quant q2|q4] [--seed S] [--tiny-vocab | --vocab tokenizer.json]\n"
          "\n"
          "  -h, --help     this text\n"
          "      --version  print the version\n", stdout);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { help(); return 0; }
        if (!strcmp(argv[i], "--version")) { printf("ds4cl-mkmodel %s\n", DS4CL_VERSION); return 0; }
        fprintf(stderr, "ds4cl-mkmodel: unknown option '%s'\nTry 'ds4cl-mkmodel --help'.\n", argv[i]);
        return 2;
    }
    help();
    return 2;
}
