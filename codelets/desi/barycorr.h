/* Barycentric wavelength correction of a DESI exposure (desispec's --barycentric-correction). */
#ifndef SP_DESI_BARYCORR_H
#define SP_DESI_BARYCORR_H

/*
 * The factor HELIOCOR = 1 + v/c by which desispec multiplies an exposure's
 * wavelengths (desispec.heliocentric.barycentric_velocity_multiplicative_corr:
 * astropy's SkyCoord.radial_velocity_correction(kind='barycentric') at Kitt
 * Peak, 31.96403 N, 111.59989 W, 2097 m), computed with ERFA as astropy does:
 *
 *   beta = (v_earth,BCRS + v_obs,GCRS) / c
 *   HELIOCOR = gamma (1 + beta . n) / (1 + phi / c^2)
 *
 * with n the ICRS unit vector of (ra, dec), gamma = 1/sqrt(1 - |beta|^2),
 * and phi = -GM_sun/|r_obs - r_sun| - GM_earth/|r_obs - r_earth| the
 * gravitational potential at the observatory (Wright & Eastman 2014, eq. 28,
 * without the Shapiro delay and the target's own motion).  The Earth's
 * barycentric velocity is ERFA's eraEpv00 (astropy's default 'builtin'
 * ephemeris), the observatory's from the Earth rotation angle with UT1 =
 * UTC and no polar motion.  Against astropy with IERS tables the neglected
 * UT1 - UTC (< 0.9 s), polar motion and the Jupiter and Moon potentials
 * change v by less than 0.05 m/s: 2e-10 in HELIOCOR, 1e-6 Angstrom at
 * 7600 Angstrom.
 *
 * ra, dec in degrees (ICRS), mjd the UTC modified Julian date of the
 * exposure.  Returns 0, or -1 for a date ERFA cannot convert (before 1960)
 * or non-finite input.
 */
int desi_barycentric_factor(double ra, double dec, double mjd, double *factor);

#endif /* SP_DESI_BARYCORR_H */
