/* Barycentric wavelength correction with ERFA (see barycorr.h). */
#include <math.h>

#include <erfa.h>
#include <erfam.h>

#include "barycorr.h"

/* Kitt Peak, as desispec.heliocentric gives it (WGS84). */
#define KPNO_LAT_DEG 31.96403
#define KPNO_LON_DEG (-111.59989)
#define KPNO_HEIGHT_M 2097.0
/* astropy.constants (IAU 2015 nominal values), SI. */
#define GM_SUN 1.3271244e20
#define GM_EARTH 3.986004e14

int desi_barycentric_factor(double ra, double dec, double mjd, double *factor)
{
	double tai1, tai2, tt1, tt2, ut1, ut2, pvh[2][3], pvb[2][3], rc2i[3][3], pv[2][3];

	if (!isfinite(ra) || !isfinite(dec) || !isfinite(mjd) || dec < -90 || dec > 90)
		return -1;
	/* UTC -> TT (leap seconds from ERFA's table); TDB - TT < 2 ms is
	 * neglected, as it changes the Earth's velocity by < 1e-8 m/s. */
	if (eraUtctai(ERFA_DJM0, mjd, &tai1, &tai2) < 0 || eraTaitt(tai1, tai2, &tt1, &tt2) != 0 ||
	    eraUtcut1(ERFA_DJM0, mjd, 0.0, &ut1, &ut2) < 0)
		return -1;
	/* The Earth's barycentric and heliocentric position and velocity (au, au/day). */
	if (eraEpv00(tt1, tt2, pvh, pvb) < 0)
		return -1;

	/* The observatory in the CIRS (m, m/s) from the Earth rotation angle,
	 * then in the GCRS: the transpose of the GCRS -> CIRS matrix. */
	eraPvtob(KPNO_LON_DEG * ERFA_DD2R, KPNO_LAT_DEG * ERFA_DD2R, KPNO_HEIGHT_M, 0, 0, 0,
		 eraEra00(ut1, ut2), pv);
	eraC2i06a(tt1, tt2, rc2i);
	double r_obs[3], v_obs[3];
	eraTrxp(rc2i, pv[0], r_obs);
	eraTrxp(rc2i, pv[1], v_obs);

	double beta[3], to_sun[3], n[3], b2 = 0, bn = 0, d_sun = 0, d_earth = 0;
	const double au = ERFA_DAU, au_per_day = ERFA_DAU / ERFA_DAYSEC;
	eraS2c(ra * ERFA_DD2R, dec * ERFA_DD2R, n);
	for (int k = 0; k < 3; k++) {
		beta[k] = (pvb[1][k] * au_per_day + v_obs[k]) / ERFA_CMPS;
		b2 += beta[k] * beta[k];
		bn += beta[k] * n[k];
		/* observatory - Sun = Earth's heliocentric position + r_obs */
		to_sun[k] = pvh[0][k] * au + r_obs[k];
		d_sun += to_sun[k] * to_sun[k];
		d_earth += r_obs[k] * r_obs[k];
	}
	double phi = -GM_SUN / sqrt(d_sun) - GM_EARTH / sqrt(d_earth);
	*factor = (1.0 + bn) / sqrt(1.0 - b2) / (1.0 + phi / (ERFA_CMPS * ERFA_CMPS));
	return 0;
}
