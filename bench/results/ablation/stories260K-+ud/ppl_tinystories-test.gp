set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/stories260K-+ud/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'stories260K'
plot 4.1208321378379855 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 5.487222887645568
20 9.253913961375229
30 17.866148672590505
40 32.83565154930885
e
