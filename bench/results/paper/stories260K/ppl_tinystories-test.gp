set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/stories260K/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'stories260K'
plot 4.1208321378379855 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-cov', '-' using 1:2 with linespoints title 'asvd-hessian', '-' using 1:2 with linespoints title 'asvd-l1', '-' using 1:2 with linespoints title 'asvd-l2', '-' using 1:2 with linespoints title 'asvd-rootcov', '-' using 1:2 with linespoints title 'latentllm', '-' using 1:2 with linespoints title 'plain-svd'
10 25.8323964549579
20 41.47537355209645
30 72.66726344207267
40 92.60829822666012
e
10 62.10590209774008
20 167.61071946444952
30 327.2609905762329
40 687.2436055190357
e
10 59.59045481350253
20 139.17913358515705
30 303.03434632111004
40 742.2089645008228
e
10 57.20861009666976
20 128.00796192972052
30 323.9944364831774
40 812.5107516880386
e
10 22.415229975529478
20 41.33385520685187
30 74.50474054666353
40 108.59966845446091
e
10 5.487222887645568
20 9.253913961375229
30 17.866148672590505
40 32.83565154930885
e
10 64.61742133431525
20 184.8109136434059
30 472.667887850964
40 1067.4464354513682
e
