set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/TinyStories-656K/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'TinyStories-656K'
plot 35.00014432771984 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-cov', '-' using 1:2 with linespoints title 'asvd-hessian', '-' using 1:2 with linespoints title 'asvd-l1', '-' using 1:2 with linespoints title 'asvd-l2', '-' using 1:2 with linespoints title 'asvd-rootcov', '-' using 1:2 with linespoints title 'latentllm', '-' using 1:2 with linespoints title 'plain-svd'
10 73.76914597870936
20 100.96442057971561
30 149.91911952591187
40 219.89943333960213
e
10 81.87225104155752
20 119.46890909624625
30 187.85623872765012
40 326.37847218358485
e
10 78.78491512408614
20 111.6833632882952
30 158.81253715653236
40 248.16074313498657
e
10 75.0826805721988
20 108.70640744320352
30 156.44682862383468
40 246.48319327786635
e
10 65.91156253799576
20 84.92369867857113
30 126.01546235250218
40 181.4600966412534
e
10 38.853660303478975
20 49.103586791289295
30 74.03474087040838
40 119.99470265873462
e
10 95.23494496992109
20 129.53119154383452
30 194.47342117205514
40 318.9673290000301
e
