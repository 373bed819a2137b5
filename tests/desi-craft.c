/* Makes crafted DESI inputs for the shell tests (tests/pipeline-desi.test): see tests/desi_craft.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "desi_craft.h"

static int usage(void)
{
	fprintf(stderr,
		"usage: desi-craft SRC DST card EXTNAME|PRIMARY KEY VALUE\n"
		"       desi-craft SRC DST pixel EXTNAME INDEX VALUE\n"
		"       desi-craft SRC DST coeff PARAM INDEX VALUE\n"
		"       desi-craft SRC DST allnan\n"
		"       desi-craft SRC DST fibermap nofiber|badfiber\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return usage();
	const char *dst = argv[2], *op = argv[3];
	if (craft_copy(argv[1], dst) != 0)
		return 1;
	if (strcmp(op, "card") == 0 && argc == 7)
		return craft_card(dst, strcmp(argv[4], "PRIMARY") == 0 ? NULL : argv[4], argv[5],
				  argv[6]) != 0;
	if (strcmp(op, "pixel") == 0 && argc == 7)
		return craft_pixel(dst, argv[4], atol(argv[5]), strtod(argv[6], NULL)) != 0;
	if (strcmp(op, "coeff") == 0 && argc == 7)
		return craft_psf_coeff(dst, argv[4], atol(argv[5]), strtod(argv[6], NULL)) != 0;
	if (strcmp(op, "allnan") == 0 && argc == 4)
		return craft_all_nan(dst) != 0;
	if (strcmp(op, "fibermap") == 0 && argc == 5)
		return craft_fibermap(dst, argv[4]) != 0;
	return usage();
}
